#pragma once
#include <boost/system/error_code.hpp>

#include "upstream/servers.hpp"

// What a failed step of the upstream exchange comes to, in one table: retry once on a
// fresh connection (a stale pooled one), try another server, or the status to answer (0: the response has begun, so close the
// connection and let the client see it cut short). Pure; unit-tested as a table.
namespace fg::http {

enum class stage {
  connect,        // getting a connection (pooled or new)
  send,           // writing the request to upstream
  request_body,   // reading the client's body while sending it (its errors are the client's)
  response_head,  // reading upstream's response head
  response_body,  // relaying upstream's response body
};

// The client's side of a request body going wrong, as errors of their own.
enum class body_errc { too_large = 1, timeout, malformed, over_quota };
const boost::system::error_category& body_category();
inline boost::system::error_code make_error_code(body_errc e) { return {static_cast<int>(e), body_category()}; }

struct exchange_state {
  bool reused = false;          // the connection came from the pool (the peer may have closed it)
  bool retry_safe = false;      // idempotent and no body: sending it twice is harmless
  bool first = true;            // no retry has been made yet
  bool response_begun = false;  // bytes of the response went to the client
  bool try_expired = false;     // the timeout was the try's (upstream.try_timeout), not the read's
};

struct failure_action {
  bool retry = false;
  unsigned status = 0;   // to answer, unless retry; 0: close without an answer
  bool upstream = true;  // the upstream's fault (logged as a warning), else the client's
  // Instead of the answer, the request may go to another server (upstream.retries):
  // nothing was sent, or it is safe to send again and nothing came back.
  bool another_server = false;
};

failure_action on_failure(stage at, boost::system::error_code ec, const exchange_state& s);

// What a failed step counts as against its server (passive health): a connect failure,
// a timeout, a connection closed or reset before any answer; not a malformed or
// oversized answer, which a client's request can provoke from a healthy server.
upstream::failure_kind health_failure(stage at, boost::system::error_code ec);

// Whether a try whose request body's write failed with `ec` at `at` may have its answer
// waiting: a server that answers before the whole body (a 413, a 401) and closes makes
// the write fail, and its answer, if it came, is the response (as nginx relays it), not
// a 502 and a failure counted against it.
bool may_have_answered(stage at, bool has_body, boost::system::error_code ec);

// Words for a log line: "connect failed", "no response", ...
const char* describe(stage at, boost::system::error_code ec);

}  // namespace fg::http

template <>
struct boost::system::is_error_code_enum<fg::http::body_errc> : std::true_type {};
