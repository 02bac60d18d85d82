#include "http/tunnel.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <memory>

namespace fg::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

// One direction. Each side's timer is shared by both directions (tcp_stream has one
// per operation kind), so the read timeout here is the tunnel's idle timeout.
asio::awaitable<void> pump(beast::tcp_stream& from, beast::flat_buffer& pending, beast::tcp_stream& to,
                           std::chrono::milliseconds idle, std::uint64_t& count) {
  if (pending.size()) {
    to.expires_after(idle);
    auto [ec, n] = co_await asio::async_write(to, pending.data(), use_tuple);
    if (ec) {
      from.socket().close(ec);
      co_return;
    }
    count += n;
    pending.consume(pending.size());
  }
  auto buf = std::make_unique<char[]>(16384);
  for (;;) {
    from.expires_after(idle);
    auto [rec, n] = co_await from.async_read_some(asio::buffer(buf.get(), 16384), use_tuple);
    if (rec == asio::error::eof) {
      boost::system::error_code ignored;
      to.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
      co_return;
    }
    if (rec) {
      // Timeout or reset: end both directions.
      boost::system::error_code ignored;
      to.socket().close(ignored);
      from.socket().close(ignored);
      co_return;
    }
    to.expires_after(idle);
    auto [wec, m] = co_await asio::async_write(to, asio::buffer(buf.get(), n), use_tuple);
    if (wec) {
      boost::system::error_code ignored;
      to.socket().close(ignored);
      from.socket().close(ignored);
      co_return;
    }
    count += m;
  }
}

}  // namespace

asio::awaitable<tunnel_stats> run_tunnel(beast::tcp_stream& down, beast::flat_buffer& down_buf, beast::tcp_stream& up,
                                         beast::flat_buffer& up_buf, std::chrono::milliseconds idle) {
  using namespace asio::experimental::awaitable_operators;
  tunnel_stats stats;
  auto a = pump(down, down_buf, up, idle, stats.down_to_up);
  auto b = pump(up, up_buf, down, idle, stats.up_to_down);
  co_await (std::move(a) && std::move(b));
  co_return stats;
}

}  // namespace fg::http
