#pragma once
#include <string>
#include <string_view>

#include <boost/beast/http/message.hpp>

#include "http/framing.hpp"

namespace fg::http {

struct forward_context {
  std::string_view peer_ip;     // socket peer, appended to X-Forwarded-For
  bool peer_trusted = false;    // its X-Forwarded-Proto/-Host are kept
  std::string_view request_id;  // set when the request carries none
  bool upgrade = false;         // forward Upgrade/Connection: upgrade (WebSocket)
  body_framing framing;
  std::string_view target;      // replaces the request target when set (absolute-form rewritten)
  std::string_view host;        // replaces the Host value when set
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

// The response head sent downstream. Appends to `out`.
void build_downstream_response(const boost::beast::http::response_header<>& h, const response_context& ctx,
                               std::string& out);

// Does the request ask for a protocol upgrade we tunnel (Connection: upgrade + Upgrade)?
bool is_upgrade_request(const boost::beast::http::request_header<>& h);

// A random request id: 32 lowercase hex digits.
std::string make_request_id();
// The same, written into `out` (reusing its capacity: no allocation per request).
void make_request_id(std::string& out);

}  // namespace fg::http
