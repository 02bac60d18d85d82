// The upstream exchange's failure mapping, as a table: (stage, error, reused,
// idempotent without body, first attempt, response begun) -> retry once, or a status and
// whether another server may be tried instead.
#include <catch2/catch.hpp>

#include <boost/asio/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>

#include "http/upstream_failure.hpp"

using fg::http::stage;
using boost::system::error_code;
namespace bhttp = boost::beast::http;

namespace {
struct row {
  stage at;
  error_code ec;
  bool reused, retry_safe, first, begun;
  bool retry;
  unsigned status;
  bool upstream_fault;
  bool another_server;  // may go to another server instead of the answer
};
}  // namespace

TEST_CASE("upstream failures map to one retry, another server, or one status", "[http][failure]") {
  const error_code reset = boost::asio::error::connection_reset;
  const error_code eos = bhttp::error::end_of_stream;
  const error_code eof = boost::asio::error::eof;
  const error_code pipe = boost::asio::error::broken_pipe;
  const error_code stale = boost::asio::error::not_connected;  // (upstream::send_batch::stale_connection)
  const error_code timeout = boost::beast::error::timeout;
  const error_code refused = boost::asio::error::connection_refused;
  const error_code bad = bhttp::error::bad_version;
  const error_code too_large = fg::http::make_error_code(fg::http::body_errc::too_large);
  const error_code body_timeout = fg::http::make_error_code(fg::http::body_errc::timeout);
  const error_code malformed = fg::http::make_error_code(fg::http::body_errc::malformed);
  const error_code over_quota = fg::http::make_error_code(fg::http::body_errc::over_quota);
  const row table[] = {
      // at                  error     reused safe  first  begun  -> retry status upstream another
      {stage::connect,       refused,  false, true,  true,  false, false, 502, true, true},
      {stage::connect,       timeout,  true,  true,  true,  false, false, 502, true, true},
      {stage::send,          pipe,     true,  true,  true,  false, true,  0, true, false},   // stale pooled connection
      {stage::send,          pipe,     true,  true,  false, false, false, 502, true, true},   // only once
      {stage::send,          pipe,     false, true,  true,  false, false, 502, true, true},   // a fresh one failed
      {stage::send,          pipe,     true,  false, true,  false, false, 502, true, false},   // a body / not idempotent
      {stage::send,          timeout,  true,  true,  true,  false, false, 502, true, false},   // a slow write: not twice
      // a pooled connection the send's look found stale: nothing went out, any method again
      {stage::send,          stale,    true,  false, true,  false, true,  0, true, false},
      {stage::send,          stale,    true,  false, false, false, false, 502, true, false},  // only once
      {stage::response_head, boost::asio::error::timed_out, true, true, false, false, false, 502, true, false},  // ETIMEDOUT
      {stage::request_body,  too_large, true, false, true,  false, false, 413, false, false},
      {stage::request_body,  body_timeout, true, false, true, false, false, 408, false, false},
      {stage::request_body,  malformed, true, false, true,  false, false, 400, false, false},
      {stage::request_body,  over_quota, true, false, true, false, false, 429, false, false},
      {stage::response_head, eos,      true,  true,  true,  false, true,  0, true, false},
      {stage::response_head, reset,    true,  true,  true,  false, true,  0, true, false},
      {stage::response_head, eof,      true,  true,  true,  false, true,  0, true, false},
      {stage::response_head, eos,      true,  true,  false, false, false, 502, true, true},
      {stage::response_head, eos,      false, true,  true,  false, false, 502, true, true},
      {stage::response_head, eos,      true,  false, true,  false, false, 502, true, false},
      {stage::response_head, bad,      true,  true,  true,  false, false, 502, true, false},   // something came back
      {stage::response_head, timeout,  true,  true,  true,  false, false, 504, true, false},   // never retried
      {stage::response_body, reset,    true,  true,  true,  false, false, 502, true, false},
      {stage::response_body, timeout,  true,  true,  true,  false, false, 504, true, false},
      {stage::response_body, reset,    true,  true,  true,  true,  false, 0, true, false},   // cut short: close
      {stage::response_body, timeout,  true,  true,  true,  true,  false, 0, true, false},
  };
  int n = 0;
  for (const auto& r : table) {
    fg::http::exchange_state s{r.reused, r.retry_safe, r.first, r.begun};
    auto a = fg::http::on_failure(r.at, r.ec, s);
    INFO("row " << n << ": " << fg::http::describe(r.at, r.ec) << " / " << r.ec.message());
    CHECK(a.retry == r.retry);
    if (!r.retry) CHECK(a.status == r.status);
    CHECK(a.upstream == r.upstream_fault);
    if (!r.retry) CHECK(a.another_server == r.another_server);
    ++n;
  }
}

TEST_CASE("a failed step counts against its server only when the server caused it", "[http][failure]") {
  using fg::upstream::failure_kind;
  const error_code reset = boost::asio::error::connection_reset;
  const error_code eos = bhttp::error::end_of_stream;
  const error_code pipe = boost::asio::error::broken_pipe;
  const error_code timeout = boost::beast::error::timeout;
  const error_code refused = boost::asio::error::connection_refused;
  const error_code bad = bhttp::error::bad_version;
  const error_code too_large = fg::http::make_error_code(fg::http::body_errc::too_large);
  CHECK(fg::http::health_failure(stage::connect, refused) == failure_kind::connect);
  CHECK(fg::http::health_failure(stage::connect, timeout) == failure_kind::timeout);
  CHECK(fg::http::health_failure(stage::response_head, boost::asio::error::timed_out) == failure_kind::timeout);
  CHECK(fg::http::health_failure(stage::send, pipe) == failure_kind::reset);
  CHECK(fg::http::health_failure(stage::response_head, eos) == failure_kind::reset);
  CHECK(fg::http::health_failure(stage::response_body, reset) == failure_kind::reset);
  // A malformed or oversized answer, or the client's own body: not the server's fault.
  CHECK(fg::http::health_failure(stage::response_head, bad) == failure_kind::none);
  CHECK(fg::http::health_failure(stage::request_body, too_large) == failure_kind::none);
  CHECK(fg::http::health_failure(stage::request_body, reset) == failure_kind::none);
}

TEST_CASE("a try past try_timeout may go to another server, a read past response_timeout may not",
          "[http][failure]") {
  const error_code timeout = boost::beast::error::timeout;
  fg::http::exchange_state s;
  s.retry_safe = true;
  s.try_expired = true;
  auto a = fg::http::on_failure(stage::response_head, timeout, s);
  CHECK(!a.retry);
  CHECK(a.status == 504);
  CHECK(a.another_server);
  s.retry_safe = false;  // a body was sent, or the method is not idempotent
  CHECK(!fg::http::on_failure(stage::response_head, timeout, s).another_server);
  s.retry_safe = true;
  s.try_expired = false;
  CHECK(!fg::http::on_failure(stage::response_head, timeout, s).another_server);
}
