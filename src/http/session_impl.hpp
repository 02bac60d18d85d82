#pragma once
// The session class template, over its downstream stream: a TCP socket or a TLS stream
// in the product, a beast::test::stream in its unit tests. It is HTTP/1.1 on one
// connection (connection.hpp: the stream, buffer, deadline entry and place it holds):
// it reads each request's head, serves it through its exchange (exchange.hpp: the
// request's whole life, framing apart), and is the exchange's downstream: the request
// body read through Beast's parser, the answers framed as HTTP/1.1 and written with a
// deadline renewed as the client reads. One exchange at a time, reused request after
// request; idle, the connection is parked (serve.hpp). Its members are defined in
// session_read.ipp (heads, the request loop, bodies, the close) and session_write.ipp
// (answers), instantiated in session.cpp and session_tls.cpp through the connection
// loop (serve.hpp). Beast-heavy: include only from those.
#include <boost/asio/compose.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <span>
#include <string>

#include "http/body_write.hpp"
#include "http/connection.hpp"
#include "http/exchange.hpp"
#include "http/framing.hpp"
#include "http/h2.hpp"
#include "http/stream_io.hpp"
#include "http/tunnel.hpp"
#include "http/worker_context.hpp"
#include "net/unsent.hpp"
#include "upstream/send_batch.hpp"

namespace fg::http::detail {

using request_parser = bhttp::request_parser<bhttp::buffer_body>;

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
          return batch->add(s, bufs, std::move(self), false, upstream::send_batch::completes::with_some);
      }
    }
    beast::buffers_suffix<std::span<const asio::const_buffer>> rest(bufs);
    rest.consume(done);
    s.async_write_some(rest, std::move(self));
  }
};

template <class Stream>
class session {
 public:
  // `peer`: the client's address (normalized), for identity and logs; `slot`: the
  // connection's place under http.max_connections.
  session(worker_context& ctx, Stream stream, connection_slot slot, const net::address& peer, bool resumed);

  // True when the connection is to be parked (idle between requests): then take its
  // stream, its place and its deadline with release().
  asio::awaitable<bool> run();
  // The subject of the connection's verified client certificate (a limit's client_cert key).
  void set_client_cert(std::string subject) { client_cert_ = std::move(subject); }
  typename connection<Stream>::released release() { return conn_.release(); }
  // The client began with HTTP/2's preface (http2.cleartext): run() ended for it, and
  // the bytes read so far are taken here (the connection is HTTP/2's from now on).
  bool wants_h2() const { return !preread_.empty(); }
  std::string take_preread() { return std::move(preread_); }

  // The exchange's downstream (exchange.hpp): the request it reads, its body, its answers.
  const bhttp::request_header<>& request() const { return parser_->get().base(); }
  bool keep_alive() const { return parser_->keep_alive(); }
  bool body_done() const { return parser_->is_done(); }
  deadline::entry& watch() { return conn_.watch(); }
  const net::address& peer() const { return peer_; }
  std::string_view peer_str() const { return peer_str_; }
  std::string_view client_cert() const { return client_cert_; }
  // X-Forwarded-Proto: the listener's scheme, not the client's say.
  static constexpr std::string_view scheme = is_tls<Stream> ? "https" : "http";
  // The access log's: as the request line said it.
  std::string_view protocol() const { return parser_->get().version() == 10 ? "HTTP/1.0" : "HTTP/1.1"; }
  asio::awaitable<bool> send_continue();
  bool start_body(bool chunked);
  asio::awaitable<error_code> read_body(char* data, std::size_t size, std::size_t& produced);
  asio::awaitable<outcome> send_local(unsigned status, bool keep_alive, std::string_view body = {},
                                      std::string_view extra = {}, std::string_view content_type = {});
  bool begin_response(response_parser& rp, std::string_view extra, bool may_keep_alive, response_start& out);
  char* inline_room(std::size_t n);
  std::span<const asio::const_buffer> response_piece(bool head_too, const char* data, std::size_t n, bool last);
  // Arms the deadline and returns the write, a deferred operation (no coroutine frame):
  // `co_await` it for (error_code, bytes) and pass the error through timed(). The
  // deadline is renewed each time the client takes some of it (write_down_op).
  auto write(std::span<const asio::const_buffer> bufs) {
    return asio::async_compose<decltype(deferred_tuple), void(error_code, std::size_t)>(
        write_down_op<Stream>{conn_.stream(), conn_.watch(), ex_.rt().cfg->http.idle_timeout, bufs}, deferred_tuple);
  }
  asio::awaitable<bool> wait_turn(std::chrono::milliseconds wait);
  // (the client's end is seen when its connection is read or written)
  bool client_gone() const { return false; }
  // (trailers on HTTP/1.1 are dropped: a chunked body's trailer section is not written)
  void set_trailers(std::span<const std::pair<std::string, std::string>>) {}
  void stream_idle(std::chrono::milliseconds) {}
  asio::awaitable<bool> upgrade(upstream::connection& up, response_parser& rp, std::string_view extra,
                                std::function<void()> renew, std::chrono::milliseconds every, tunnel_stats& stats);

 private:
  // session_read.ipp: the request head, the connection's close.
  asio::awaitable<outcome> read_head(bool first);
  unsigned parse_head();
  // The client's first bytes against HTTP/2's preface (http2.cleartext, plain listener):
  // whole, they are taken into preread_.
  enum class preface_seen { none, part, whole };
  preface_seen h2_preface_in(beast::flat_buffer& buffer);
  // An answer to bytes that make no request (400, 408, 431 while a head is read).
  asio::awaitable<outcome> reject(unsigned status);
  asio::awaitable<void> lingering_close();
  bool nothing_more_coming();
  // An idle keep-alive connection holds no buffers: they go back to the allocator,
  // and come again with the next request's bytes.
  void release_idle_memory();

  worker_context& ctx_;
  connection<Stream> conn_;  // the stream, its read buffer, its deadline entry, its place
  net::address peer_;
  std::string peer_str_;
  head_scanner scanner_;
  lazy_optional<request_parser> parser_;
  bool head_parsed_ = false;  // parser_ holds the head of the request being read or served
  chunk_vetter vetter_;  // a chunked request body's framing, followed as it comes
  chunk_vetter* body_vet_ = nullptr;  // &vetter_ while a chunked body is read
  std::string head_out_;  // the response head (and a small body behind it: inline_room)
  std::size_t head_len_ = 0;
  bool down_chunked_ = false;  // the response goes down chunked
  bool length_framed_ = false;  // ... with a Content-Length
  bool inline_ = false;  // its body follows the head in head_out_
  body_write writes_;  // the buffers of the response write in flight
  std::size_t requests_ = 0;
  std::string client_cert_;
  std::string preread_;  // (see wants_h2)
  exchange<session> ex_{ctx_, *this};  // (last: gone first, with what its request holds)
};

}  // namespace fg::http::detail
