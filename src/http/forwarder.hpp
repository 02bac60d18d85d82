#pragma once
#include <span>
#include <string>
#include <string_view>

#include <boost/beast/http/message.hpp>

#include "http/framing.hpp"
#include "http/response_head.hpp"

namespace fg::http {

struct forward_context {
  std::string_view peer_ip;     // socket peer, the X-Forwarded-For when `xff` is empty
  bool peer_trusted = false;    // its X-Forwarded-Proto/-Host are kept
  std::string_view request_id;  // set when the request carries none
  bool upgrade = false;         // forward Upgrade: websocket / Connection: upgrade
  body_framing framing;
  std::string_view target;      // replaces the request target when set (absolute-form rewritten)
  std::string_view host;        // replaces the Host value when set
  std::string_view default_host;  // the Host of a request that has none (HTTP/1.0): the upstream's
  std::string_view proto = "http";  // X-Forwarded-Proto, unless a trusted peer sent one: the listener's scheme
  // What the upstream is told about the client. The request's own X-Forwarded-For,
  // Forwarded and `client_header` are never copied: these values replace them.
  std::string_view xff;            // X-Forwarded-For; empty: the peer alone
  std::string_view forwarded;      // Forwarded; empty: none
  std::string_view client_header;  // e.g. X-Real-IP, set to `client_ip`; empty: none
  std::string_view client_ip;
  // Identity headers not forwarded (names compared with '_' read as '-').
  std::span<const std::string> drop;
  // Trace context (tracing.propagate): this traceparent replaces the request's; the
  // request's tracestate fields go up only when `trace_continued`. Empty: both as they came.
  std::string_view traceparent;
  bool trace_continued = false;
};

// The request head sent upstream: HTTP/1.1, hop-by-hop fields (and those named in
// Connection) removed, framing restated, X-Forwarded-* and X-Request-Id set. Appends to `out`.
void build_upstream_request(const boost::beast::http::request_header<>& h, const forward_context& ctx,
                            std::string& out);

// The request's X-Request-Id if it is usable (short, visible ASCII), else empty.
std::string_view incoming_request_id(const boost::beast::http::request_header<>& h);
// The same test on one value.
std::string_view usable_request_id(std::string_view value);

enum class response_framing { none, length, chunked, close_delimited };

struct response_context {
  response_framing framing = response_framing::none;
  std::uint64_t length = 0;
  bool keep_alive = true;     // the downstream connection stays open after this response
  unsigned client_version = 11;
  bool upgrade = false;       // a 101 being relayed
  std::string_view extra;     // raw "Name: value\r\n" lines appended (rate-limit headers)
};

// The response head sent downstream. Appends to `out`. False when the upstream named a
// transfer coding other than one `chunked` (the body, framed anew, would reach the client
// undone; beside a Content-Length, the framing is ambiguous).
bool build_downstream_response(const response_head& h, const response_context& ctx,
                               std::string& out);

// Does the request ask for the one protocol upgrade we tunnel, WebSocket (a GET with
// Connection: upgrade and Upgrade: websocket)? Any other Upgrade (h2c, ...) is not
// forwarded: a tunnel to it would carry later requests past routing and limits.
bool is_upgrade_request(const boost::beast::http::request_header<>& h);
// Does a 101 response switch to WebSocket?
bool is_websocket_response(const response_head& h);

// A valid Host / authority (RFC 9110 §7.2): a name of letters, digits and "-._~", an
// IPv4 address, or an [IPv6] literal, then an optional port of 1-5 digits up to 65535.
// No spaces, '/', '@', userinfo or percent-escapes: what an upstream or a log could
// read as another host.
bool valid_host(std::string_view host);

// A random request id: 32 lowercase hex digits.
std::string make_request_id();
// The same, written into `out` (reusing its capacity: no allocation per request).
void make_request_id(std::string& out);

}  // namespace fg::http
