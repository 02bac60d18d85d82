#pragma once
// tracing.export (members of exchange<Down>, exchange.hpp): a request's span, and a
// child span per upstream try, handed to the exporter when the request ends (its access
// log line). A span is made only for a sampled trace, or a denied request (never sent
// upstream: no tries), denials tracing.export.denied_per_second at most, and only while
// the exporter's queue has room: a flood of denials costs a relaxed load or two each
// past that. An unsampled request takes no try marks. Each try tells the upstream its
// own span as the parent, so that the service's span is the try's child.
#include <chrono>

#include "http/exchange.hpp"
#include "obs/span_export.hpp"

namespace fg::http::detail {

// A try begins: a new span id, put in the head it sends (the traceparent's parent id).
// A try still open (refused, or turned away by a GOAWAY, and sent again) ends here.
template <class Down>
void exchange<Down>::span_try_begin(std::string& head) {
  auto& tries = spans_.tries;
  const auto now = clock::now();
  if (!tries.empty() && tries.back().end == clock::time_point{}) {
    tries.back().end = now;
    tries.back().error = "refused by the server before it was processed";
  }
  if (tries.size() >= max_span_tries) {
    // (past the most kept, the upstream is told of the request's own span: never of a try
    // that ended)
    restate_parent(head, ad_.traceparent, span_id_of(ad_.traceparent));
    return;
  }
  auto& t = tries.emplace_back();
  make_span_id(t.id.data());
  t.start = now;
  t.server = choice_.address();
  restate_parent(head, ad_.traceparent, std::string_view(t.id.data(), t.id.size()));
}

// The try in flight failed at `at` (or, with no `ec`, ended for `why`).
template <class Down>
void exchange<Down>::span_try_end(stage at, error_code ec, std::string_view why) {
  if (spans_.tries.empty() || spans_.tries.back().end != clock::time_point{}) return;
  auto& t = spans_.tries.back();
  t.end = clock::now();
  if (ec) t.error.assign(describe(at, ec)).append(": ").append(ec.message());
  else t.error.assign(why);
}

namespace spans {
inline std::string_view verdict_name(span_marks::verdict v) {
  using verdict = span_marks::verdict;
  switch (v) {
    case verdict::allowed: return "allowed";
    case verdict::delayed: return "delayed";
    case verdict::denied: return "denied";
    case verdict::refused: return "refused";
    case verdict::unavailable: return "store_unavailable";
    default: return "none";
  }
}
template <std::size_t N>
void copy_id(std::array<char, N>& to, std::string_view from) {
  std::copy_n(from.data(), N, to.data());
}
// "HTTP/1.1" -> "1.1" (OpenTelemetry's network.protocol.version)
inline std::string_view version_of(std::string_view protocol) {
  return protocol.starts_with("HTTP/") ? protocol.substr(5) : protocol;
}
}  // namespace spans

template <class Down>
void exchange<Down>::export_span(unsigned status) {
  const std::string_view tp = ad_.traceparent;
  const bool denied = spans_.decision == span_marks::verdict::denied;
  if (tp.size() != 55 || !(spans_.sampled || denied)) return;
  const auto now = clock::now();
  // Denials, sampled or not (a client a trusted proxy lets name its trace can mark its
  // flood sampled), denied_per_second at most.
  if (denied &&
      !ctx_.spans->take_denial(std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count(),
                               rt_->cfg->tracing.exporter.denied_per_second))
    return;
  if (!ctx_.spans->has_room(1 + spans_.tries.size())) return;
  const auto wall = std::chrono::system_clock::now().time_since_epoch();
  auto unix_ns = [&](clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(wall - (now - t)).count();
  };
  const auto& req = down_.request();
  const auto* route = ad_.route >= 0 ? &rt_->cfg->routes[static_cast<std::size_t>(ad_.route)] : nullptr;
  std::vector<obs::span> out;
  out.reserve(1 + spans_.tries.size());
  auto& s = out.emplace_back();
  spans::copy_id(s.trace_id, trace_id_of(tp));
  spans::copy_id(s.span_id, span_id_of(tp));
  if (ad_.trace_continued) s.parent_id = ad_.trace_parent_span;
  // (what the client wrote, cut at 1 KiB: a span is not a place for a 64 KiB path)
  const auto method = std::string_view(req.method_string()).substr(0, 1024);
  s.name.assign(method).append(" ").append(route ? route->name : "");
  s.start_ns = unix_ns(started_);
  s.end_ns = unix_ns(now);
  s.error = status >= 500;
  s.add("http.request.method", method);
  s.add("url.path", std::string_view(ad_.path).substr(0, 1024));
  s.add("http.response.status_code", static_cast<std::int64_t>(status));
  s.add("network.protocol.version", spans::version_of(down_.protocol()));
  s.add("client.address", ad_.client.who.key.empty() ? down_.peer_str() : std::string_view(ad_.client.who.key));
  if (route) s.add("floodgate.route", route->name);
  s.add("floodgate.request_id", ad_.request_id);
  s.add("floodgate.decision", spans::verdict_name(spans_.decision));
  for (std::size_t i = 0; denied && i < limits_.decisions.size() && i < limits_.checks.size(); ++i)
    if (!limits_.decisions[i].allowed && !limits_.checks[i].cfg->shadow) {
      s.add("floodgate.limit", limits_.checks[i].cfg->name);
      break;
    }
  if (spans_.asked != clock::time_point{} && spans_.decided >= spans_.asked)
    s.add("floodgate.store_us",
          std::chrono::duration_cast<std::chrono::microseconds>(spans_.decided - spans_.asked).count());
  if (delayed_ms_) s.add("floodgate.delay_ms", delayed_ms_);
  if (grpc_status_ >= 0) s.add("rpc.grpc.status_code", static_cast<std::int64_t>(grpc_status_));
  const std::string_view upstream = route ? std::string_view(rt_->upstreams[route->upstream_index].name) : "";
  for (std::size_t i = 0; i < spans_.tries.size(); ++i) {
    const auto& t = spans_.tries[i];
    auto& c = out.emplace_back();
    c.trace_id = s.trace_id;
    c.span_id = t.id;
    c.parent_id = s.span_id;
    c.name.assign(method);
    c.kind = 3;
    c.start_ns = unix_ns(t.start);
    c.end_ns = unix_ns(t.end == clock::time_point{} ? now : t.end);
    c.add("server.address", t.server);
    c.add("floodgate.upstream", upstream);
    c.add("floodgate.try", static_cast<std::int64_t>(i + 1));
    if (t.status) c.add("http.response.status_code", static_cast<std::int64_t>(t.status));
    c.error = !t.error.empty() || t.status >= 500;
    c.message = t.error;
  }
  ctx_.spans->submit(std::move(out));
}

}  // namespace fg::http::detail
