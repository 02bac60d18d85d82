#pragma once
#include <boost/beast/http/message.hpp>

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "http/framing.hpp"
#include "http/compiled_config.hpp"
#include "net/client_ip.hpp"

namespace fg::http {

// What a request head comes to before any I/O: a local answer (`status`, with its
// keep-alive and body), or a route, a client identity and a body framing to go on
// with. Kept by the session and reused request after request (strings keep capacity).
struct admission {
  unsigned status = 0;  // 0: admitted
  bool keep_alive = false;
  std::string_view body;
  // Admitted:
  int route = -1;
  body_framing framing;
  std::string_view expect;
  bool has_expect = false;
  bool has_upgrade = false;
  std::string request_id;
  std::string path;        // normalized, for routing
  std::string abs_host, abs_target;  // an absolute-form target's authority and origin-form
  // tracing.propagate: the traceparent sent upstream ("" when off); whether it continues
  // the request's trace (its tracestate fields then go up as they came, else dropped).
  std::string traceparent;
  bool trace_continued = false;
  std::array<char, 16> trace_parent_span{};  // a continued trace's: the span the gateway's is a child of
  net::client_view client;  // who the client is (limits count client.who.key), under this snapshot

  bool has_body() const { return framing.type != body_framing::kind::none; }
  void release_memory();
};

using net::peer_info;

// Judges a parsed request head under `rt`: framing (RFC 9112), Host, '_' spellings of
// interpreted fields, the target's path and authority, the route, and the client's
// identity. Reads nothing but its arguments and writes only `out`.
// `keep_alive`: the parser's reading of the request's.
void admit(const compiled_config& rt, const boost::beast::http::request_header<>& req, bool keep_alive, const peer_info& peer,
           admission& out);

}  // namespace fg::http
