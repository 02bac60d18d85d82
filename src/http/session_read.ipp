#pragma once
// The session's reading (members of session<Stream>, session_impl.hpp): request heads,
// the request loop, the request body for the exchange, the connection's close. Its
// answers are session_write.ipp; the request's own life is the exchange's
// (exchange_limits.ipp, exchange_upstream.ipp).
#include <spdlog/spdlog.h>

#include "http/exchange_limits.ipp"
#include "http/exchange_upstream.ipp"
#include "http/session_impl.hpp"
#include "net/peek.hpp"

namespace fg::http::detail {

template <class Stream>
session<Stream>::session(worker_context& ctx, Stream stream, connection_slot slot, const net::address& peer,
                         bool resumed)
    : ctx_(ctx), conn_(ctx, std::move(stream), std::move(slot)), peer_(peer), peer_str_(peer.to_string()),
      requests_(resumed ? 1 : 0) {}

template <class Stream>
asio::awaitable<outcome> session<Stream>::read_head(bool first) {
  const auto& http = ex_.rt().cfg->http;
  // Room for a whole head of http.max_header_bytes and one byte more (what tells 431),
  // whatever a reload made of it.
  auto& buffer = conn_.buffer();
  auto& watch = conn_.watch();
  buffer.max_size(std::max({connection<Stream>::buffer_max, http.max_header_bytes + 1, buffer.size()}));
  scanner_.reset();
  head_parsed_ = false;  // (parser_ may still hold the last request's head)
  auto deadline = first ? deadline::after(http.header_timeout) : clock::time_point::max();
  for (;;) {
    // Tolerate empty lines between pipelined requests (RFC 9112 §2.2).
    while (bytes_of(buffer).starts_with("\r\n")) buffer.consume(2);
    const auto preface = first ? h2_preface_in(buffer) : preface_seen::none;
    if (preface == preface_seen::whole) co_return outcome::h2;
    if (buffer.size() > 0) {
      watch.set_busy();
      if (deadline == clock::time_point::max()) deadline = deadline::after(http.header_timeout);
      auto st = preface == preface_seen::part ? head_scanner::state::need_more
                                              : scanner_.scan(bytes_of(buffer).substr(0, http.max_header_bytes + 1));
      if (st == head_scanner::state::complete) {
        if (scanner_.head_size() > http.max_header_bytes) co_return co_await reject(431);
        break;
      }
      if (st == head_scanner::state::bad) {
        spdlog::debug("{}: rejected request: {}", peer_str_, scanner_.error());
        co_return co_await reject(400);
      }
      if (buffer.size() > http.max_header_bytes) co_return co_await reject(431);
    } else {
      watch.set_idle();
      if (ctx_.draining) {
        watch.stay_awake();
        co_return outcome::close;
      }
    }
    watch.arm_at(deadline == clock::time_point::max() ? deadline::after(http.idle_timeout) : deadline);
    if constexpr (is_socket<Stream> || is_tls<Stream>) {
      if (watch.lean()) {
        // Idle for a while: wait for bytes with no buffer at all.
        release_idle_memory();
        auto [wec] = co_await socket_of(conn_.stream())->async_wait(tcp::socket::wait_read, deferred_tuple);
        watch.woke();
        if (wec && watch.expired()) {
          watch.set_busy();  // the sweeper must not take back the answer's write
          if (!first) co_return outcome::close;
          co_return co_await reject(408);
        }
        if (wec) co_return outcome::closed;
      }
    }
    // (not while OpenSSL holds bytes of the client's: the socket would not show them)
    if (buffer.size() == 0 && !holds_input(conn_.stream()))
      watch.lean_at(deadline::after(deadline::lean_after));
    // A head usually fits in 4 KiB: reads grow past that only for larger ones.
    auto space = std::min<std::size_t>(buffer.max_size() - buffer.size(), buffer.size() ? 16384 : 4096);
    // (a read of no bytes completes at once: a full buffer would spin, never time out)
    if (space == 0) co_return co_await reject(431);
    auto [ec, n] = co_await conn_.stream().async_read_some(buffer.prepare(space), read_token<Stream>());
    // The sweeper took back an idle read to wait without its buffer: between requests the
    // connection is parked (no session at all), a new one waits here with nothing held.
    if (ec == asio::error::operation_aborted && watch.lean() && !watch.expired() && !ctx_.draining) {
      if (!first && buffer.size() == 0 && !holds_input(conn_.stream())) co_return outcome::park;
      continue;
    }
    watch.woke();
    watch.stay_awake();
    if (ec && watch.expired()) {
      // An idle keep-alive connection just closes; a slow or silent request head gets 408.
      if (buffer.size() == 0 && !first) co_return outcome::close;
      co_return co_await reject(408);
    }
    if (ec) co_return outcome::closed;
    buffer.commit(n);
  }
  if (auto refused = parse_head()) co_return co_await reject(refused);
  watch.set_busy();
  co_return outcome::keep_going;
}

template <class Stream>
typename session<Stream>::preface_seen session<Stream>::h2_preface_in(beast::flat_buffer& buffer) {
  if constexpr (is_socket<Stream>) {
    if (!ex_.rt().cfg->http2.cleartext || buffer.size() == 0) return preface_seen::none;
    const auto got = bytes_of(buffer).substr(0, h2_preface.size());
    if (!h2_preface.starts_with(got)) return preface_seen::none;
    if (got != h2_preface) return preface_seen::part;
    preread_.assign(bytes_of(buffer));
    buffer.consume(buffer.size());
    return preface_seen::whole;
  } else {
    return preface_seen::none;
  }
}

// Beast parses the head we have vetted: 0, or the status that refuses it (400; 431 for
// a field Beast cannot hold, over 64 KiB, even where http.max_header_bytes allows the head).
template <class Stream>
unsigned session<Stream>::parse_head() {
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(ex_.rt().cfg->http.max_header_bytes + 4));
  parser_->body_limit(boost::none);
  parser_->eager(false);
  error_code ec;
  std::size_t used = 0;
  try {
    used = parser_->put(asio::buffer(conn_.buffer().data().data(), scanner_.head_size()), ec);
  } catch (const std::length_error& e) {
    spdlog::debug("{}: rejected request: {}", peer_str_, e.what());
    parser_.emplace();  // (the one that threw is half-filled)
    return 431;
  }
  if (ec || !parser_->is_header_done()) {
    spdlog::debug("{}: rejected request: {}", peer_str_, ec ? ec.message() : "incomplete head");
    return 400;
  }
  conn_.buffer().consume(used);
  parser_->eager(true);
  head_parsed_ = true;
  return 0;
}

template <class Stream>
asio::awaitable<bool> session<Stream>::run() {
  for (;;) {
    ex_.use_current();
    auto o = co_await read_head(requests_ == 0);
    if (o == outcome::park) co_return true;
    if (o == outcome::h2) co_return false;  // (the connection goes on as HTTP/2: see wants_h2)
    if (o == outcome::keep_going) {
      // One request, in this frame (a frame per request costs an allocation's worth),
      // under the configuration in effect when its head arrived, to its end: the
      // snapshot and the decision source that came with it (a reload may swap ctx_'s
      // meanwhile; the worker keeps the old source while a request holds the snapshot).
      ex_.use_current();
      ++requests_;
      auto request = ex_.begin();  // (holds its leases and the body block to its end)
      auto st = ex_.decide(request.source());
      if (st == limit::status::pending) {
        auto [ec] = co_await ex_.wait(request.source());
        st = ex_.decided(request.source(), ec);
      }
      o = co_await ex_.respond(st);
    }
    if (o == outcome::close) co_await lingering_close();
    if (o != outcome::keep_going) break;
  }
  close_stream(conn_.stream());
  co_return false;
}

// A chunked body's framing is followed from its first byte, those buffered behind the
// head first: false (logged) when they are malformed.
template <class Stream>
bool session<Stream>::start_body(bool chunked) {
  body_vet_ = chunked ? &vetter_ : nullptr;
  if (!chunked || start_vetting(vetter_, conn_.buffer())) return true;
  spdlog::debug("{}: rejected request: {}", peer_str_, vetter_.error());
  return false;
}

// The next piece of the request body, into `data` (at most `size` bytes): `produced`
// bytes. (Not a coroutine: read_into's frame is the only one.)
template <class Stream>
asio::awaitable<error_code> session<Stream>::read_body(char* data, std::size_t size, std::size_t& produced) {
  auto& body = parser_->get().body();
  body.data = data;
  body.size = size;
  return read_into(conn_.watch(), conn_.stream(), conn_.buffer(), *parser_, ex_.rt().cfg->http.idle_timeout, produced,
                   false, body_vet_);
}

template <class Stream>
void session<Stream>::release_idle_memory() {
  if constexpr (is_tls<Stream>) conn_.stream().release_buffers();
  conn_.buffer().shrink_to_fit();  // empty: gives the storage back
  parser_.release();
  std::string().swap(head_out_);
  ex_.release_memory();
}

// Whether the client has sent all it is going to (nginx's `lingering_close on`): its
// request read whole, no byte past it here, in OpenSSL or on the socket (under TLS, or
// only its close_notify). A client that asked for the close (or was told) then sends
// nothing more, and is not waited for.
template <class Stream>
bool session<Stream>::nothing_more_coming() {
  if constexpr (is_socket<Stream> || is_tls<Stream>) {
    if (conn_.buffer().size() != 0 || holds_input(conn_.stream())) return false;
    if (!parser_ || !parser_->is_header_done() || !parser_->is_done()) return false;
    // (its end already: nothing to drain either)
    if (net::peek_input(socket_of(conn_.stream())->native_handle()) != net::pending_input::bytes) return true;
    // (a TLS client that read its answer closes with close_notify, often before this look)
    if constexpr (is_tls<Stream>) return conn_.stream().read_close_notify();
    return false;
  } else {
    return false;
  }
}

template <class Stream>
asio::awaitable<void> session<Stream>::lingering_close() {
  if (nothing_more_coming()) {
    if constexpr (is_tls<Stream>) conn_.stream().send_close_notify();
    co_return;  // (run() closes the socket: our response is sent before the FIN)
  }
  // Half-close, then drain what the client is still sending so that our response is
  // not destroyed by a reset; bounded in time and bytes.
  error_code ec;
  half_close(conn_.stream(), ec);
  if (ec) co_return;
  auto until = clock::now() + std::chrono::seconds(2);
  std::size_t total = 0;
  char sink[4096];
  while (total < 4 * 1024 * 1024) {
    conn_.watch().arm_at(until);
    auto [rec, n] = co_await conn_.stream().async_read_some(asio::buffer(sink), read_token<Stream>());
    if (rec) break;
    total += n;
  }
}

}  // namespace fg::http::detail
