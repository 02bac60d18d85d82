#include "http/forwarder.hpp"

#include "util/text.hpp"

#include <algorithm>
#include <cctype>
#include <array>
#include <charconv>
#include <cstring>
#include <cstdint>
#include "util/asio.hpp"
#include "util/random.hpp"

namespace fg::http {


using util::iequals;
using util::trim;

namespace {

template <class F>
void for_each_token(std::string_view v, F&& f) {
  while (!v.empty()) {
    auto comma = v.find(',');
    auto t = trim(v.substr(0, comma));
    if (!t.empty()) f(t);
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
}

// Names listed in Connection headers (lower-case comparisons done by caller).
template <class Fields>
bool named_in_connection(const Fields& h, std::string_view name) {
  bool found = false;
  for (const auto& f : h)
    if (f.name() == bhttp::field::connection)
      for_each_token(f.value(), [&](std::string_view t) { found = found || iequals(t, name); });
  return found;
}

bool always_hop_by_hop(bhttp::field f) {
  switch (f) {
    case bhttp::field::connection:
    case bhttp::field::keep_alive:
    case bhttp::field::proxy_connection:
    case bhttp::field::proxy_authenticate:
    case bhttp::field::proxy_authorization:
    case bhttp::field::te:
    case bhttp::field::trailer:
    case bhttp::field::transfer_encoding:
    case bhttp::field::upgrade:
    case bhttp::field::content_length:
      return true;
    default:
      return false;
  }
}

// One resize and direct copies, not four appends: every forwarded field passes here.
void append_field(std::string& out, std::string_view name, std::string_view value) {
  const std::size_t old = out.size();
  out.resize(old + name.size() + value.size() + 4);
  char* p = out.data() + old;
  p = util::put(util::put(p, name), ": ");
  util::put(util::put(p, value), "\r\n");
}

// The names listed in Connection, collected in one pass. The hop-by-hop names that are
// removed anyway (close, keep-alive, upgrade) are left out, so the usual list is empty.
template <class Fields>
class connection_tokens {
 public:
  explicit connection_tokens(const Fields& h) {
    for (const auto& f : h) {
      if (f.name() != bhttp::field::connection) continue;
      for_each_token(f.value(), [&](std::string_view t) {
        if (iequals(t, "close") || iequals(t, "keep-alive") || iequals(t, "upgrade")) return;
        if (n_ < names_.size()) names_[n_++] = t;
        else overflow_ = true;
      });
    }
    fields_ = &h;
  }
  bool empty() const { return n_ == 0 && !overflow_; }
  bool contains(std::string_view name) const {
    for (std::size_t i = 0; i < n_; ++i)
      if (iequals(names_[i], name)) return true;
    return overflow_ && named_in_connection(*fields_, name);
  }

 private:
  std::array<std::string_view, 16> names_;
  std::size_t n_ = 0;
  bool overflow_ = false;
  const Fields* fields_ = nullptr;
};

}  // namespace

std::string_view usable_request_id(std::string_view value) {
  auto v = trim(value);
  if (v.empty() || v.size() > 128) return {};
  for (char c : v)
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) return {};
  return v;
}

std::string_view incoming_request_id(const bhttp::request_header<>& h) {
  auto it = h.find("x-request-id");
  return it == h.end() ? std::string_view() : usable_request_id(it->value());
}

bool is_upgrade_request(const bhttp::request_header<>& h) {
  if (h.method() != bhttp::verb::get || h.version() < 11) return false;
  bool websocket = false;
  for (auto it = h.find(bhttp::field::upgrade); it != h.end() && it->name() == bhttp::field::upgrade; ++it)
    for_each_token(it->value(), [&](std::string_view t) { websocket = websocket || iequals(t, "websocket"); });
  return websocket && named_in_connection(h, "upgrade");
}

bool is_websocket_response(const response_head& h) {
  return iequals(trim(h[bhttp::field::upgrade]), "websocket");
}

bool valid_host(std::string_view h) {
  if (h.empty()) return false;
  std::string_view port;
  if (h.front() == '[') {
    auto close = h.find(']');
    if (close == std::string_view::npos || close < 3) return false;
    for (char c : h.substr(1, close - 1))
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return false;
    auto rest = h.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return false;
    if (!rest.empty()) port = rest.substr(1), h = {};
    else h = {};
    if (rest.size() == 1) return false;
  } else {
    auto colon = h.find(':');
    if (colon != std::string_view::npos) {
      port = h.substr(colon + 1);
      h = h.substr(0, colon);
      if (port.empty() || h.empty()) return false;
    }
    for (char c : h)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_' && c != '~') return false;
  }
  if (port.size() > 5) return false;
  unsigned value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  return value <= 65535;
}

void build_upstream_request(const bhttp::request_header<>& h, const forward_context& ctx, std::string& out) {
  out.append(h.method_string()).append(" ").append(ctx.target.empty() ? std::string_view(h.target()) : ctx.target).append(" HTTP/1.1\r\n");
  connection_tokens conn(h);
  std::string_view fwd_proto, fwd_host;
  std::string_view incoming_id;
  std::string_view host;
  auto dropped = [&](std::string_view name) {
    if (iequals(name, "x-forwarded-for") || iequals(name, "forwarded") || iequals(name, "http2-settings")) return true;
    if (!ctx.client_header.empty() && util::iequals_folded(name, ctx.client_header)) return true;
    return std::any_of(ctx.drop.begin(), ctx.drop.end(), [&](const std::string& d) { return util::iequals_folded(name, d); });
  };
  for (const auto& f : h) {
    auto id = f.name();
    auto name = f.name_string();
    if (always_hop_by_hop(id) || id == bhttp::field::expect) continue;
    if (id == bhttp::field::host) {
      host = ctx.host.empty() ? std::string_view(f.value()) : ctx.host;
      append_field(out, name, host);
      continue;
    }
    if (!conn.empty() && conn.contains(name)) continue;
    if (dropped(name)) continue;
    // From a trusted proxy, the last of each: what a proxy that appends wrote.
    if (iequals(name, "x-forwarded-proto")) {
      if (ctx.peer_trusted) fwd_proto = f.value();
      continue;
    } else if (iequals(name, "x-forwarded-host")) {
      if (ctx.peer_trusted) fwd_host = f.value();
      continue;
    } else if (iequals(name, "x-request-id")) {
      // Restated once below: the request's own id when usable, else ctx.request_id.
      if (incoming_id.empty()) incoming_id = usable_request_id(f.value());
      continue;
    } else if (!ctx.traceparent.empty() &&
               (iequals(name, "traceparent") || (!ctx.trace_continued && iequals(name, "tracestate")))) {
      continue;  // (restated below)
    }
    append_field(out, name, f.value());
  }
  bool own_host = false;
  if (host.empty()) {  // the request has no Host field
    if (!ctx.host.empty()) host = ctx.host;
    else if (!ctx.default_host.empty()) host = ctx.default_host, own_host = true;
    if (!host.empty()) append_field(out, "Host", host);
  }
  append_field(out, "X-Forwarded-For", ctx.xff.empty() ? ctx.peer_ip : ctx.xff);
  if (!ctx.forwarded.empty()) append_field(out, "Forwarded", ctx.forwarded);
  if (!ctx.client_header.empty() && !ctx.client_ip.empty() && !iequals(ctx.client_header, "x-forwarded-for"))
    append_field(out, ctx.client_header, ctx.client_ip);
  append_field(out, "X-Forwarded-Proto", fwd_proto.empty() ? ctx.proto : fwd_proto);
  // The upstream's own name, given for want of the client's, is not the client's host.
  if (!fwd_host.empty()) append_field(out, "X-Forwarded-Host", fwd_host);
  else if (!host.empty() && !own_host) append_field(out, "X-Forwarded-Host", host);
  if (!incoming_id.empty()) append_field(out, "X-Request-Id", incoming_id);
  else if (!ctx.request_id.empty()) append_field(out, "X-Request-Id", ctx.request_id);
  if (!ctx.traceparent.empty()) append_field(out, "traceparent", ctx.traceparent);
  if (ctx.upgrade) {
    append_field(out, "Connection", "Upgrade");
    append_field(out, "Upgrade", "websocket");
  }
  switch (ctx.framing.type) {
    case body_framing::kind::chunked:
      append_field(out, "Transfer-Encoding", "chunked");
      break;
    case body_framing::kind::length: {
      char buf[24];
      auto [p, ec] = std::to_chars(buf, buf + sizeof buf, ctx.framing.length);
      append_field(out, "Content-Length", std::string_view(buf, static_cast<std::size_t>(p - buf)));
      break;
    }
    case body_framing::kind::none:
      // A body-less POST/PUT still states its length, as origin servers expect.
      if (h.method() == bhttp::verb::post || h.method() == bhttp::verb::put || h.method() == bhttp::verb::patch)
        append_field(out, "Content-Length", "0");
      break;
  }
  out.append("\r\n");
}

bool build_downstream_response(const response_head& h, const response_context& ctx, std::string& out) {
  char num[24];
  auto [p, ec] = std::to_chars(num, num + sizeof num, h.result_int());
  out.append(ctx.client_version >= 11 ? "HTTP/1.1 " : "HTTP/1.0 ")
      .append(num, static_cast<std::size_t>(p - num))
      .append(" ");
  auto reason = h.reason();
  if (reason.empty()) reason = bhttp::obsolete_reason(bhttp::int_to_status(h.result_int()));
  out.append(reason).append("\r\n");
  connection_tokens conn(h);
  unsigned codings = 0;  // Transfer-Encoding fields, and whether each said `chunked` alone
  bool chunked_only = true;
  // The fields kept go out as the head holds them, a run of adjacent ones in one copy.
  std::string_view run;
  for (const auto& f : h) {
    if (always_hop_by_hop(f.name())) {
      if (f.name() == bhttp::field::transfer_encoding) ++codings, chunked_only = chunked_only && iequals(f.value(), "chunked");
      continue;
    }
    if (!conn.empty() && conn.contains(f.name_string())) continue;
    const auto line = f.line();
    if (run.data() + run.size() == line.data()) {
      run = {run.data(), run.size() + line.size()};
    } else {
      out.append(run);
      run = line;
    }
  }
  out.append(run);
  switch (ctx.framing) {
    case response_framing::length: {
      auto [q, ec2] = std::to_chars(num, num + sizeof num, ctx.length);
      append_field(out, "Content-Length", std::string_view(num, static_cast<std::size_t>(q - num)));
      break;
    }
    case response_framing::chunked:
      append_field(out, "Transfer-Encoding", "chunked");
      break;
    default:
      break;
  }
  if (ctx.upgrade) {
    append_field(out, "Connection", "Upgrade");
    append_field(out, "Upgrade", h[bhttp::field::upgrade]);
  } else if (!ctx.keep_alive) {
    append_field(out, "Connection", "close");
  } else if (ctx.client_version < 11) {
    append_field(out, "Connection", "keep-alive");
  }
  out.append(ctx.extra);
  out.append("\r\n");
  return codings <= 1 && chunked_only;
}

void make_request_id(std::string& id) {
  static constexpr auto table = [] {
    std::array<char, 512> t{};
    constexpr char hex[] = "0123456789abcdef";
    for (int i = 0; i < 256; ++i) t[static_cast<std::size_t>(2 * i)] = hex[i >> 4], t[static_cast<std::size_t>(2 * i + 1)] = hex[i & 0xf];
    return t;
  }();
  id.resize(32);
  char* out = id.data();
  for (int half = 0; half < 2; ++half) {
    std::uint64_t z = util::unique_random();
    for (int i = 0; i < 8; ++i, z >>= 8) std::memcpy(out + half * 16 + i * 2, &table[(z & 0xff) * 2], 2);
  }
}

std::string make_request_id() {
  std::string id;
  make_request_id(id);
  return id;
}

}  // namespace fg::http
