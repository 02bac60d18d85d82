#pragma once
#include <boost/beast/http/message.hpp>

#include "http/forwarder.hpp"
#include "http/response_parser.hpp"

// What an upstream response's head decides about its way down: the framing the client
// gets, and whether the upstream connection can serve another request after it. Beast
// heavy: included by the session's upstream half only.
namespace fg::http::detail {

namespace bhttp = boost::beast::http;

// How the response goes to the client: its framing there, and whether upstream's
// connection can be reused after it.
struct response_plan {
  response_context rc;
  bool body_expected = true;
  bool up_close_delimited = false;
};

inline response_plan plan_response(const bhttp::request_header<>& req, bool req_keep_alive, response_parser& rp,
                                   bool draining) {
  response_plan p;
  auto& rc = p.rc;
  const unsigned status = rp.get().result_int();
  const bool head = req.method() == bhttp::verb::head;
  rc.client_version = req.version();
  rc.keep_alive = req_keep_alive && !draining;
  p.body_expected = !(head || status == 204 || status == 304 || status == 101);
  if (!p.body_expected) {
    rc.framing = response_framing::none;
    // A HEAD answer keeps the upstream's Content-Length as information.
    if (head && rp.content_length()) {
      rc.framing = response_framing::length;
      rc.length = *rp.content_length();
    }
  } else if (rp.chunked()) {
    rc.framing = req.version() >= 11 ? response_framing::chunked : response_framing::close_delimited;
  } else if (rp.content_length()) {
    rc.framing = response_framing::length;
    rc.length = *rp.content_length();
  } else {
    p.up_close_delimited = true;
    rc.framing = req.version() >= 11 ? response_framing::chunked : response_framing::close_delimited;
  }
  if (rc.framing == response_framing::close_delimited) rc.keep_alive = false;
  return p;
}

}  // namespace fg::http::detail
