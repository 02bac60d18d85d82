#pragma once
// The session class template, over its downstream stream: a TCP socket or a TLS stream
// in the product, a beast::test::stream in its unit tests. It serves the requests of
// one connection (connection.hpp: the stream, buffer, deadline entry and place it
// holds) until it closes or idles. Its members are defined in session_read.ipp
// (reading, local answers, the limits) and session_upstream.ipp (the upstream
// exchange), instantiated in session.cpp and session_tls.cpp through the connection
// loop (serve.hpp). Beast-heavy: include only from those.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include "http/admission.hpp"
#include "http/body_write.hpp"
#include "http/connection.hpp"
#include "http/worker_context.hpp"
#include "http/framing.hpp"
#include "http/response_parser.hpp"
#include "http/upstream_failure.hpp"
#include "limit/checks_cache.hpp"
#include "limit/decision_source.hpp"
#include "limit/keys.hpp"
#include "net/unsent.hpp"
#include "upstream/choice.hpp"
#include "upstream/pool.hpp"
#include "upstream/send_batch.hpp"
#include "util/asio.hpp"

namespace fg::http::detail {

using clock = std::chrono::steady_clock;
using request_parser = bhttp::request_parser<bhttp::buffer_body>;
using response_parser = http::response_parser;
using util::deferred_tuple;
// Body bytes move through one buffer of this size per session, in both directions.
constexpr std::size_t body_chunk = 32 * 1024;
static_assert(body_chunk == 32 * 1024, "http::worker_context::bodies lends blocks of this size");
// A response body of at most this many bytes (Content-Length framed), already read whole
// behind its head, goes down in one buffer with the head (relay_response).
constexpr std::size_t inline_body_max = 1024;

// What a buffer holds, as text.
inline std::string_view bytes_of(const beast::flat_buffer& b) {
  return {static_cast<const char*>(b.data().data()), b.size()};
}

// Maps a cancelled wait whose deadline passed to a timeout.
inline error_code timed(const deadline::entry& e, error_code ec) {
  return ec && e.expired() ? error_code(beast::error::timeout) : ec;
}

// What every accepted client socket is set to: no Nagle delay, and a bound on what
// waits unsent in the kernel (net::bound_unsent: a slow reader's writes move on as it
// reads, see write_down_op).
inline void set_client_options(tcp::socket& s) {
  error_code ec;
  s.set_option(tcp::no_delay(true), ec);
  net::bound_unsent(s.native_handle());
}

// A whole write to the client whose deadline, `timeout`, is renewed each time the client
// takes some of it (nginx's send_timeout): a slow reader that keeps reading gets the
// whole of a large body, one that stops is let go `timeout` after it stopped. (A
// deadline over the whole write cut a reader slower than its send buffer: once the
// kernel's buffer was full, the last piece waited for it to drain.) On plain TCP the
// first try goes with the thread's send_batch, when there is one: a turn's responses go
// out in the submission that carries its upstream writes. (A TLS stream's write takes
// one buffer of several at a time, or those that fit one record: tls::gather.)
template <class Stream>
struct write_down_op {
  Stream& s;
  deadline::entry& watch;
  std::chrono::milliseconds timeout;
  std::span<const asio::const_buffer> bufs;
  std::size_t done = 0;
  bool started = false;

  template <class Self>
  void operator()(Self& self, error_code ec = {}, std::size_t n = 0) {
    done += n;
    if (started && (ec || done == asio::buffer_size(bufs))) return self.complete(ec, done);
    // (the sweeper cancelled the write, and the batch's part of it completed anyway)
    if (started && watch.expired()) return self.complete(asio::error::operation_aborted, done);
    watch.arm(timeout);
    if (!std::exchange(started, true)) {
      if constexpr (is_socket<Stream>) {
        if (auto* batch = upstream::send_batch::current())
          return batch->add(s, bufs, std::move(self), false, upstream::send_batch::completes::with_some, true);
      }
    }
    beast::buffers_suffix<std::span<const asio::const_buffer>> rest(bufs);
    rest.consume(done);
    s.async_write_some(rest, std::move(self));
  }
};

// The completion token for a read of the stream's own: deferred (no coroutine frame) on
// a socket; Beast's test stream predates deferred, and is awaited through use_awaitable.
template <class Stream>
constexpr auto read_token() {
  if constexpr (is_socket<Stream> || is_tls<Stream> || std::is_same_v<Stream, upstream::connection>)
    return deferred_tuple;
  else return asio::as_tuple(asio::use_awaitable);
}
// An optional T kept on the heap, so that an idle connection can give its storage
// back (release()) while a busy one reuses it request after request.
template <class T>
class lazy_optional {
 public:
  T& emplace() {
    if (!box_) box_ = std::make_unique<std::optional<T>>();
    return box_->emplace();
  }
  void release() { box_.reset(); }
  explicit operator bool() const { return box_ && box_->has_value(); }
  T* operator->() { return &**box_; }
  const T* operator->() const { return &**box_; }
  T& operator*() { return **box_; }

 private:
  std::unique_ptr<std::optional<T>> box_;
};

template <class Stream>
class session {
 public:
  // `peer`: the client's address (normalized), for identity and logs; `slot`: the
  // connection's place under http.max_connections.
  session(worker_context& ctx, Stream stream, connection_slot slot, const net::address& peer, bool resumed);
  ~session();

  // True when the connection is to be parked (idle between requests): then take its
  // stream, its place and its deadline with release().
  asio::awaitable<bool> run();
  // The subject of the connection's verified client certificate (a limit's client_cert key).
  void set_client_cert(std::string subject) { client_cert_ = std::move(subject); }
  typename connection<Stream>::released release() { return conn_.release(); }

 private:
  enum class outcome { keep_going, close, closed, park };

  // session_read.ipp: the request head, local answers, the limits.
  asio::awaitable<outcome> read_head(bool first);
  unsigned parse_head();
  // Admits the request just read (http/admission.hpp).
  void begin_request();
  // The route's limits: asks the worker's decision source (a plain function around the
  // one wait for Redis, so that a limited request costs no coroutine frame of its own).
  limit::request_parts key_parts() const;
  limit::status ask_limits(limit::decision_source& source);
  // The upstream answered (its response head): its health, the time since `t0` (access
  // log, metrics), the costs a response tells (charge_after, session_read.ipp).
  void head_arrived(const config::route_config& route, clock::time_point t0);
  void charge_after(const response_head* res);
  asio::awaitable<outcome> refuse(limit::status st);
  void restate_denials();
  asio::awaitable<outcome> refuse_over_quota(std::uint64_t bytes);
  asio::awaitable<outcome> forward_in_turn();
  asio::awaitable<bool> wait_turn(std::chrono::milliseconds wait);
  asio::awaitable<outcome> send_local(unsigned status, bool keep_alive, std::string_view body = {},
                                      std::string_view extra = {}, std::string_view content_type = {});
  // After a refusal (429, 503), the connection stays open only if the unread body
  // cannot be mistaken for a request.
  bool keeps_after_refusal() { return parser_->keep_alive() && !ad_.has_body(); }
  asio::awaitable<void> lingering_close();
  bool nothing_more_coming();
  // An idle keep-alive connection holds no buffers: they go back to the allocator,
  // and come again with the next request's bytes.
  void release_idle_memory();
  void log_request(unsigned status);
  // Arms the deadline and returns the write, a deferred operation (no coroutine frame):
  // `co_await` it for (error_code, bytes) and pass the error through timed(). The
  // deadline is renewed each time the client takes some of it (write_down_op).
  auto write_down(std::span<const asio::const_buffer> bufs) {
    return asio::async_compose<decltype(deferred_tuple), void(error_code, std::size_t)>(
        write_down_op<Stream>{conn_.stream(), conn_.watch(), rt_->cfg->http.idle_timeout, bufs}, deferred_tuple);
  }

  // session_upstream.ipp: the upstream exchange.
  asio::awaitable<outcome> forward();
  void build_request_head(const config::route_config& route, bool upgrade);
  // What reading a body's first piece came to: its size, the status to answer instead
  // (refuse), or that the client is gone.
  struct first_piece {
    std::size_t bytes = 0;
    unsigned refuse = 0;
    bool client_gone = false;
  };
  asio::awaitable<first_piece> read_first_piece();
  void log_failure(const config::upstream_config& cfg, stage at, error_code ec, bool upstream_fault) const;
  std::optional<std::uint64_t> balance_key(const config::upstream_config& up) const;
  struct next_try {
    bool again = false;    // else answer `status`
    bool idle_ok = false;  // the next try may take a pooled connection
    unsigned status = 0;
  };
  // A try failed at `at`: the connection `up` dropped, the failure counted and logged,
  // what next (on the last try, what the body read so far costs is charged).
  next_try after_failure(const config::upstream_config& up_cfg, stage at, error_code ec, exchange_state& st,
                         upstream::connection_ptr& up);
  asio::awaitable<error_code> send_rest_of_body(upstream::connection& up, const config::upstream_config& cfg);
  // A fresh parser for the response head (1xx other than 101 are read past). It lives in
  // the session, not in a coroutine frame: Asio recycles frames only up to ~1 KiB, a
  // larger frame costs a malloc per request.
  void prepare_response_parser() {
    rp_.emplace();
    rp_->header_limit(64 * 1024);
    rp_->body_limit(boost::none);
    if (parser_->get().method() == bhttp::verb::head) rp_->skip(true);
  }
  // Interim answers (1xx) read past before a response: more is a 502 (Go's client stops
  // at 5), so that an upstream cannot hold a request with 1xx alone.
  static constexpr unsigned max_interim_responses = 8;
  // After a response head was read: whether it is an interim answer to read past (1xx
  // other than 101), `interim` counting them; past the most, `ec` says malformed. So is
  // a status below 100 (RFC 9110 §15 has 100-599; Beast reads any three digits), as
  // nginx has it, not a line "HTTP/1.1 0" sent on.
  bool read_past(error_code& ec, unsigned& interim) {
    if (ec) return false;
    const auto code = rp_->get().result_int();
    if (code < 100) ec = bhttp::error::bad_status;
    if (ec || code >= 200 || code == 101) return false;
    if (++interim <= max_interim_responses) return true;
    ec = bhttp::error::bad_status;
    return false;
  }
  asio::awaitable<outcome> relay_response(upstream::connection& up, const config::upstream_config& cfg,
                                          bool& reusable);
  asio::awaitable<outcome> run_upgrade(upstream::connection& up, unsigned status);
  auto write_up(upstream::connection& up, std::span<const asio::const_buffer> bufs, std::chrono::milliseconds timeout);

  // Lent by the worker for one request's bodies (given back in run()).
  char* body_buf() {
    if (!body_buf_) body_buf_ = ctx_.bodies.take();
    return body_buf_.get();
  }
  void give_back_body_buf() {
    if (body_buf_) ctx_.bodies.give(std::move(body_buf_));
  }

  worker_context& ctx_;
  connection<Stream> conn_;  // the stream, its read buffer, its deadline entry, its place
  net::address peer_;
  std::string peer_str_;
  std::shared_ptr<const compiled_config> rt_;
  head_scanner scanner_;
  lazy_optional<request_parser> parser_;
  lazy_optional<response_parser> rp_;
  bool early_answer_ = false;  // the upstream answered before the request's whole body
  upstream::choice choice_;  // this request's server (forward() ends its hold)
  std::unique_ptr<char[]> body_buf_;
  std::string head_out_;
  body_write writes_;  // the buffers of the body write in flight
  admission ad_;
  chunk_vetter vetter_;
  chunk_vetter* up_vet_ = nullptr;  // the upstream response's, while its chunked body is read
  std::string peer_key_;
  std::shared_ptr<const compiled_config> peer_key_rt_;
  limit::limit_call limits_;  // this request's limits and what they said
  limit::checks_cache checks_cache_;  // whether limits_.checks serve the client's next request
  std::uint64_t bytes_in_ = 0, bytes_out_ = 0;
  double upstream_ms_ = -1;
  std::int64_t delayed_ms_ = 0;  // how long this request waited for its turn (on_exceed: delay)
  clock::time_point started_;
  std::size_t requests_ = 0;
  std::string client_cert_;
};

}  // namespace fg::http::detail
