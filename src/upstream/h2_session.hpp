#pragma once
// HTTP/2 to an upstream's server (RFC 9113), nghttp2 its codec in the client's role: one
// connection (h2_session) carries many requests at once, each an h2_call. A call's
// waits end with its own deadline entry (the upstream's timeouts: a timeout) and with
// its client's (the client gone or out of time: the call is abandoned), each through
// the entry's upstream hook (watch_upstream), as an HTTP/1.1 connection's reads do. Flow control bounds what a response buffers:
// a stream's window (h2_limits_up::stream_window) opens again only as its exchange reads
// the body, so a client that reads slowly pauses its own upstream stream; the
// connection's window is given back as DATA arrives, so such a stream never stalls the
// others on the connection.
#include <nghttp2/nghttp2.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "deadline/board.hpp"
#include "upstream/connection.hpp"

namespace fg::upstream {

class h2_call;

struct h2_limits_up {
  static constexpr std::int32_t stream_window = 65535;         // a response's body buffered, unread
  static constexpr std::int32_t connection_window = 1 << 24;   // (given back at once: never the bound)
  static constexpr std::size_t max_head_bytes = 64 * 1024;     // a response head's, and its trailers', decoded
};

// A field of a response head or of its trailers.
using h2_field = std::pair<std::string, std::string>;

class h2_session : public std::enable_shared_from_this<h2_session> {
 public:
  // `c`: connected (its TLS, if any, negotiated h2 by ALPN).
  explicit h2_session(connection_ptr c);
  ~h2_session();
  h2_session(const h2_session&) = delete;
  h2_session& operator=(const h2_session&) = delete;

  // Its reader and writer, on the connection's executor (they hold the session).
  void start();
  // A new stream may start on it: alive, no GOAWAY, fewer streams open than the server's
  // SETTINGS_MAX_CONCURRENT_STREAMS.
  bool open_for_more() const;
  bool dead() const { return dead_; }
  // No longer offered for new calls: going away (its GOAWAY came), or retired.
  bool leaving() const { return dead_ || goaway_ || retired_; }
  std::size_t active() const { return calls_.size(); }
  // Ends it now; its calls see the connection reset.
  void close();
  // The pool no longer offers it: it ends once its last stream has (at once if it has
  // none: call it after the first call's start on a session the pool did not keep).
  void unpool() {
    pooled_ = false;
    if (calls_.empty()) close();
  }
  const connection& conn() const { return *conn_; }
  std::chrono::steady_clock::time_point idle_since{};

 private:
  friend class h2_call;
  boost::asio::awaitable<void> reader(std::shared_ptr<h2_session> self);
  boost::asio::awaitable<void> writer(std::shared_ptr<h2_session> self);
  void flush() { write_wanted_.cancel(); }
  void die();
  static h2_call* call_of(nghttp2_session* s, std::int32_t id);
  static int on_begin_headers(nghttp2_session*, const nghttp2_frame*, void*);
  static int on_header(nghttp2_session*, const nghttp2_frame*, const std::uint8_t*, std::size_t, const std::uint8_t*,
                       std::size_t, std::uint8_t, void*);
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame*, void*);
  static int on_data(nghttp2_session*, std::uint8_t, std::int32_t, const std::uint8_t*, std::size_t, void*);
  static int on_stream_close(nghttp2_session*, std::int32_t, std::uint32_t, void*);
  static int on_frame_send(nghttp2_session*, const nghttp2_frame*, void*);
  static int on_frame_not_send(nghttp2_session*, const nghttp2_frame*, int, void*);

  connection_ptr conn_;
  nghttp2_session* session_ = nullptr;
  std::unordered_set<h2_call*> calls_;
  std::string out_;
  boost::asio::steady_timer write_wanted_;
  bool dead_ = false;
  bool goaway_ = false;  // the server's GOAWAY came (or ours went)
  bool pooled_ = true;   // (until unpool)
  bool retired_ = false;  // a call timed out with nothing heard from the server since it began
  std::uint64_t reads_ = 0;  // reads that brought bytes (a server still talking)
  // A stream ended: an idle connection the pool let go ends.
  void ended(h2_call* c) {
    calls_.erase(c);
    if (calls_.empty()) {
      idle_since = deadline::coarse_now;
      if (!pooled_) close();
    }
  }
};

// One request on an h2_session, owned by its exchange; an unfinished stream is reset
// (CANCEL) when the call goes.
class h2_call {
 public:
  using error_code = boost::system::error_code;
  h2_call() = default;
  ~h2_call() { cancel(); }
  h2_call(const h2_call&) = delete;
  h2_call& operator=(const h2_call&) = delete;

  // Submits the head (`fields`, pseudo-fields first; copied), DATA to follow when `body`.
  // Its waits end with `timeouts`' deadline (timed_out: the upstream's fault) and with
  // `client`'s (operation_aborted: the client's side ended the call). False: the
  // session takes no new stream.
  bool start(std::shared_ptr<h2_session> s, std::span<const nghttp2_nv> fields, bool body, deadline::entry& timeouts,
             deadline::entry& client);
  // The request body's next `n` bytes (held until it returns), the last when `last`.
  boost::asio::awaitable<error_code> send(const char* data, std::size_t n, bool last);
  // Until the final response head (1xx are read past).
  boost::asio::awaitable<error_code> head();
  unsigned status() const { return status_; }
  const std::vector<h2_field>& fields() const { return fields_; }
  // The response's END_STREAM came with its head.
  bool ended_with_head() const { return end_with_head_; }
  // The response body's next piece into `buf` (at most `size`); `n` 0 once done().
  boost::asio::awaitable<error_code> read(char* buf, std::size_t size, std::size_t& n);
  bool done() const { return in_end_ && in_off_ == in_.size(); }
  const std::vector<h2_field>& trailers() const { return trailers_; }
  // The server did not process the request (REFUSED_STREAM, a GOAWAY below its id, or
  // its head never sent): it may go again, anywhere (RFC 9113 §8.7).
  bool refused() const { return refused_; }
  // The server, going away (its GOAWAY came before the answer), answered the call
  // trailers-only with grpc-status 1 (CANCELLED): a gRPC server shutting down cancels
  // the calls that arrive meanwhile so (grpc-core does), without running them.
  bool turned_away() const;
  // The server reset the stream (after processing began): its error code.
  std::uint32_t reset_code() const { return reset_code_; }
  // Resets the stream (CANCEL) if it is open; every wait of the call ends.
  void cancel();
  // Ends the call's current wait (its timeouts' deadline hook).
  static void expire(void* self) { static_cast<h2_call*>(self)->wake(); }
  // Its client's deadline hook: the call is abandoned (every wait ends).
  static void abandon(void* self) {
    static_cast<h2_call*>(self)->abandoned_ = true;
    static_cast<h2_call*>(self)->wake();
  }

 private:
  friend class h2_session;
  static ssize_t read_out(nghttp2_session*, std::int32_t, std::uint8_t*, std::size_t, std::uint32_t*,
                          nghttp2_data_source*, void*);
  boost::asio::awaitable<void> sleep();
  void wake() {
    if (wake_) wake_->cancel();
  }
  error_code failed() const;
  // Why a wait ends before its event (none: wait on). A timeout with nothing heard from
  // the server since the call began retires its session (a server gone silent).
  error_code cut_short();
  // The connection ended, or the stream closed: no more callbacks for it.
  void detach(bool sent);

  std::shared_ptr<h2_session> s_;
  std::int32_t id_ = 0;
  deadline::entry* watch_ = nullptr;   // the upstream's timeouts
  deadline::entry* client_ = nullptr;  // the client's side
  bool abandoned_ = false;
  std::uint64_t reads_at_start_ = 0;
  bool goaway_before_head_ = false;
  std::unique_ptr<boost::asio::steady_timer> wake_;
  // the request body piece nghttp2 has yet to take
  const char* out_ = nullptr;
  std::size_t out_left_ = 0;
  bool out_last_ = false;
  bool head_sent_ = false;
  // the response
  unsigned status_ = 0;
  bool head_done_ = false, end_with_head_ = false;
  std::size_t head_bytes_ = 0;
  std::vector<h2_field> fields_, trailers_;
  std::string in_;
  std::size_t in_off_ = 0;
  bool in_end_ = false;
  bool closed_ = false;   // nghttp2 closed the stream (or the connection ended)
  bool refused_ = false;
  bool too_large_ = false;
  std::uint32_t reset_code_ = 0;
};

}  // namespace fg::upstream
