#include "http/tunnel.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <memory>

#include "tls/stream.hpp"
#include "upstream/connection.hpp"
#include "util/asio.hpp"

namespace fg::http {

using util::use_tuple;

using asio::ip::tcp;

namespace {

template <class A, class B>
void close_both(A& a, B& b) {
  boost::system::error_code ignored;
  a.lowest_layer().close(ignored);
  b.lowest_layer().close(ignored);
}

// One direction. Activity either way pushes the shared deadline forward.
template <class From, class To>
asio::awaitable<void> pump(deadline::entry& session, From& from, beast::flat_buffer& pending, To& to,
                           std::chrono::milliseconds idle, std::uint64_t& count) {
  if (pending.size()) {
    session.arm(idle);
    auto [ec, n] = co_await asio::async_write(to, pending.data(), use_tuple);
    if (ec) {
      close_both(from, to);
      co_return;
    }
    count += n;
    pending.consume(pending.size());
  }
  auto buf = std::make_unique<char[]>(16384);
  for (;;) {
    session.arm(idle);
    auto [rec, n] = co_await from.async_read_some(asio::buffer(buf.get(), 16384), use_tuple);
    // (a TLS upstream's close without close_notify ends its side as a plain close does)
    if (rec == asio::error::eof || rec == asio::ssl::error::stream_truncated) {
      boost::system::error_code ignored;
      to.lowest_layer().shutdown(tcp::socket::shutdown_send, ignored);
      co_return;
    }
    if (rec) {
      // Timeout or reset: end both directions.
      close_both(from, to);
      co_return;
    }
    session.arm(idle);
    auto [wec, m] = co_await asio::async_write(to, asio::buffer(buf.get(), n), use_tuple);
    if (wec) {
      close_both(from, to);
      co_return;
    }
    count += m;
  }
}

}  // namespace

asio::awaitable<void> renew_loop(std::function<void()> renew, std::chrono::milliseconds every) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  // Once at the start: the lease was taken before the upstream's 101.
  renew();
  for (;;) {
    timer.expires_after(every);
    auto [ec] = co_await timer.async_wait(use_tuple);
    if (ec) co_return;
    renew();
  }
}

template <class Down, class Up>
asio::awaitable<tunnel_stats> run_tunnel(deadline::entry& session, Down& down, beast::flat_buffer& down_buf, Up& up,
                                         beast::flat_buffer& up_buf, std::chrono::milliseconds idle,
                                         std::function<void()> renew, std::chrono::milliseconds renew_every) {
  using namespace asio::experimental::awaitable_operators;
  tunnel_stats stats;
  auto a = pump(session, down, down_buf, up, idle, stats.down_to_up);
  auto b = pump(session, up, up_buf, down, idle, stats.up_to_down);
  if (renew && renew_every.count() > 0) {
    // Ends when both directions have (the renewing is cancelled then).
    auto r = renew_loop(std::move(renew), renew_every);
    co_await ((std::move(a) && std::move(b)) || std::move(r));
  } else {
    co_await (std::move(a) && std::move(b));
  }
  co_return stats;
}

// The session's streams (a socket or the TLS listener's) to an upstream's connection.
template asio::awaitable<tunnel_stats> run_tunnel(deadline::entry&, tcp::socket&, beast::flat_buffer&,
                                                  upstream::connection&, beast::flat_buffer&, std::chrono::milliseconds,
                                                  std::function<void()>, std::chrono::milliseconds);
template asio::awaitable<tunnel_stats> run_tunnel(deadline::entry&, tls::stream&, beast::flat_buffer&,
                                                  upstream::connection&, beast::flat_buffer&, std::chrono::milliseconds,
                                                  std::function<void()>, std::chrono::milliseconds);

}  // namespace fg::http
