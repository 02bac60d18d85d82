#include "http/admission.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/url/parse.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "http/forwarder.hpp"
#include "http/trace_context.hpp"
#include "routing/rules.hpp"
#include "util/text.hpp"
#include "util/asio.hpp"

namespace fg::http {


void admission::release_memory() {
  for (auto* s : {&request_id, &path, &abs_host, &abs_target, &traceparent}) std::string().swap(*s);
  client.release_memory();
}

namespace {

// A field whose name with '_' for '-' is one the gateway reads or sets.
bool interpreted_underscore(const compiled_config& rt, const bhttp::request_header<>& req, std::string_view peer) {
  for (const auto& f : req) {
    auto name = f.name_string();
    if (f.name() != bhttp::field::unknown || name.find('_') == std::string_view::npos) continue;
    // A configured identity header may itself be spelled with '_' (HTTP_CLIENT_IP).
    const auto& fields = rt.client_ip.identity_fields();
    if (std::any_of(fields.begin(), fields.end(),
                    [&](const auto& h) { return util::iequals(name, h); }))
      continue;
    for (const auto& h : rt.interpreted)
      if (util::iequals_folded(name, h)) {
        spdlog::debug("{}: rejected request: header '{}' reads as {} with '_' for '-'", peer, name, h);
        return true;
      }
  }
  return false;
}

// Absolute-form ("GET http://host/x"): its authority is the host (RFC 9112 §3.2.2),
// and upstream gets origin-form with a Host to match, so both see one host.
bool absolute_form(std::string_view target, admission& out) {
  auto u = boost::urls::parse_absolute_uri(target);
  if (!u || u->encoded_host().empty() || u->has_userinfo() || !valid_host(u->encoded_host_and_port())) return false;
  out.abs_host.assign(u->encoded_host_and_port().data(), u->encoded_host_and_port().size());
  out.abs_target.assign(u->encoded_target().data(), u->encoded_target().size());
  if (out.abs_target.empty() || out.abs_target.front() != '/') out.abs_target.insert(0, "/");
  return true;
}

// The identity fields of a request (net::field_reader over a Beast header).
void identity_fields(const void* req, std::span<const std::string> names, std::vector<net::header_field>& out) {
  for (const auto& f : *static_cast<const bhttp::request_header<>*>(req))
    for (const auto& name : names)
      if (util::iequals(f.name_string(), name)) {
        out.push_back({f.name_string(), f.value()});
        break;
      }
}

unsigned reject(std::string_view why, std::string_view peer) {
  spdlog::debug("{}: rejected request: {}", peer, why);
  return 400;
}

}  // namespace

void admit(const compiled_config& rt, const bhttp::request_header<>& req, bool keep_alive, const peer_info& peer,
           admission& out) {
  const auto& cfg = *rt.cfg;
  out.status = 0;
  out.keep_alive = false;
  out.body = {};
  out.route = -1;
  out.request_id.clear();
  out.client.who.key.clear();
  out.abs_host.clear();
  out.abs_target.clear();
  out.traceparent.clear();
  out.trace_continued = false;
  out.expect = {};
  out.has_expect = out.has_upgrade = false;
  // One pass over the fields for what this function needs (each find() is a tree walk).
  std::string_view host, incoming_id, traceparent;
  bool has_host = false, underscore = false;
  const bool tracing = cfg.tracing.propagate;
  for (const auto& f : req) {
    switch (f.name()) {
      case bhttp::field::host: host = f.value(), has_host = true; break;
      case bhttp::field::expect: out.expect = f.value(), out.has_expect = true; break;
      case bhttp::field::upgrade: out.has_upgrade = true; break;
      case bhttp::field::unknown:
        if (incoming_id.empty() && util::iequals(f.name_string(), "x-request-id"))
          incoming_id = usable_request_id(f.value());
        else if (tracing && util::iequals(f.name_string(), "traceparent"))
          traceparent = traceparent.empty() ? std::string_view(f.value()) : std::string_view("-");  // (two: neither)
        underscore = underscore || f.name_string().find('_') != std::string_view::npos;
        break;
      default: break;
    }
  }
  if (!incoming_id.empty()) out.request_id.assign(incoming_id);
  else make_request_id(out.request_id);

  const auto framing = check_request_framing(req);
  if (!framing.accepted()) return void(out.status = reject(framing.refused, peer.text));
  out.framing = framing.framing;
  if (has_host && !valid_host(host)) return void(out.status = reject("invalid Host", peer.text));
  if (underscore && interpreted_underscore(rt, req, peer.text)) return void(out.status = 400);
  if (!routing::normalize_target_path(req.target(), out.path)) return void(out.status = 400);
  if (cfg.http.max_body_bytes && out.framing.type == body_framing::kind::length &&
      out.framing.length > cfg.http.max_body_bytes)
    return void(out.status = 413);
  if (req.target().front() != '/') {
    if (!absolute_form(req.target(), out)) return void(out.status = 400);
    host = out.abs_host;
  }
  out.route = rt.routes.match(host, req.method_string(), out.path);
  if (out.route < 0) {
    out.status = 404;
    out.keep_alive = keep_alive && !out.has_body();
    out.body = "{\"error\":\"no route\"}\n";
    return;
  }
  const bool full = cfg.client_ip.forward_chain == config::client_ip_config::chain::full;
  rt.client_ip.resolve(peer, {&identity_fields, &req}, full, out.client);
  if (tracing) {
    // A trace named by whom the configuration trusts to name one is continued; any
    // other traceparent (and its tracestate) is replaced by a new trace.
    using trust = config::tracing_config::trust;
    const auto who = cfg.tracing.trust_incoming;
    const bool trusted = who == trust::always || (who == trust::trusted_proxies && out.client.peer_trusted);
    const auto incoming = trusted ? parse_traceparent(traceparent) : std::nullopt;
    make_traceparent(incoming, cfg.tracing.sample_ratio, out.traceparent);
    out.trace_continued = incoming.has_value();
    if (incoming) std::copy_n(incoming->parent_id.data(), 16, out.trace_parent_span.data());
  }
}

}  // namespace fg::http
