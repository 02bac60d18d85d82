#include "http/upstream_failure.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include "util/asio.hpp"

namespace fg::http {

namespace {

struct body_category_impl final : boost::system::error_category {
  const char* name() const noexcept override { return "request body"; }
  std::string message(int e) const override {
    switch (static_cast<body_errc>(e)) {
      case body_errc::too_large: return "request body over http.max_body_bytes";
      case body_errc::timeout: return "request body timed out";
      case body_errc::malformed: return "malformed request body";
      case body_errc::over_quota: return "chunked request body over what its byte quota had left (cost: body_bytes)";
    }
    return "request body error";
  }
};

// Our own deadline passed (the kernel's ETIMEDOUT is a failure like any other: 502).
bool timed_out(boost::system::error_code ec) { return ec == boost::beast::error::timeout; }

// The peer closed (or reset) the connection before answering anything: on a pooled one,
// the request can go again on a fresh one. (stream_truncated: a TLS upstream's close
// without close_notify.)
bool nothing_received(boost::system::error_code ec) {
  return ec == bhttp::error::end_of_stream || ec == boost::asio::error::connection_reset ||
         ec == boost::asio::error::eof || ec == boost::asio::ssl::error::stream_truncated;
}

}  // namespace

const boost::system::error_category& body_category() {
  static const body_category_impl c;
  return c;
}

failure_action on_failure(stage at, boost::system::error_code ec, const exchange_state& s) {
  const bool may_retry = s.reused && s.retry_safe && s.first;
  switch (at) {
    // Nothing was sent: any request may go to another server.
    case stage::connect: return {false, 502, true, true};
    // A write that timed out is not tried again: the request would wait twice as long.
    case stage::send:
      if (timed_out(ec)) return {false, 502};
      // A pooled connection the batch's look found stale before sending anything
      // (upstream::send_batch::stale_connection): any request goes again, afresh.
      if (ec == boost::asio::error::not_connected && s.reused && s.first) return {true, 0};
      return may_retry ? failure_action{true, 0} : failure_action{false, 502, true, s.retry_safe};
    case stage::request_body:
      if (ec == body_errc::too_large) return {false, 413, false};
      if (ec == body_errc::over_quota) return {false, 429, false};
      return {false, ec == body_errc::timeout ? 408u : 400u, false};
    case stage::response_head:
      // A try that ran out of its own time (try_timeout) may go to another server, as
      // a reset may; a read past response_timeout is the request's end.
      if (timed_out(ec)) return {false, 504, true, s.try_expired && s.retry_safe};
      if (may_retry && nothing_received(ec)) return {true, 0};
      return {false, 502, true, s.retry_safe && nothing_received(ec)};
    case stage::response_body:
      if (s.response_begun) return {false, 0};
      return {false, timed_out(ec) ? 504u : 502u};
  }
  return {false, 502};
}

upstream::failure_kind health_failure(stage at, boost::system::error_code ec) {
  if (timed_out(ec) || ec == boost::asio::error::timed_out) return upstream::failure_kind::timeout;
  if (at == stage::connect) return upstream::failure_kind::connect;
  if (at == stage::request_body) return upstream::failure_kind::none;
  if (nothing_received(ec) || ec == boost::asio::error::broken_pipe) return upstream::failure_kind::reset;
  return upstream::failure_kind::none;
}

bool may_have_answered(stage at, bool has_body, boost::system::error_code ec) {
  return at == stage::send && has_body &&
         (ec == boost::asio::error::broken_pipe || ec == boost::asio::error::connection_reset);
}

const char* describe(stage at, boost::system::error_code ec) {
  switch (at) {
    case stage::connect: return "connect failed";
    case stage::send: return "write failed";
    case stage::request_body: return "request body aborted";
    case stage::response_head: return timed_out(ec) ? "no response in time" : "bad or missing response";
    case stage::response_body: return "response aborted";
  }
  return "failed";
}

}  // namespace fg::http
