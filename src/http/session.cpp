#include "http/session.hpp"

#include <boost/asio/co_spawn.hpp>
#include <spdlog/spdlog.h>

#include <optional>

#include "http/parked.hpp"
#include "http/session_read.ipp"
#include "http/session_upstream.ipp"
#include "obs/logging.hpp"

// The session over a TCP socket, and what the worker does with a connection: a session
// while it reads or answers, parked while it idles between requests.
namespace fg::http::detail {
template class session<tcp::socket>;
}  // namespace fg::http::detail

namespace fg::http {

namespace {

using detail::tcp;
using detail::error_code;

void spawn(worker_context& ctx, tcp::socket socket, const net::address& peer, bool resumed);

boost::asio::awaitable<void> serve(worker_context& ctx, tcp::socket socket, net::address peer, bool resumed) {
  std::optional<tcp::socket> idle;
  std::chrono::steady_clock::time_point deadline;
  {
    detail::session<tcp::socket> s(ctx, std::move(socket), peer, resumed);
    // (GCC 12: no co_await inside a condition.)
    const bool to_park = co_await s.run();
    if (to_park) {
      deadline = s.idle_deadline();
      idle.emplace(s.release_socket());
    }
  }
  // (the address is asked for again on the return: kept, it would grow every parked connection)
  if (idle)
    detail::park(ctx, std::move(*idle), deadline, [](worker_context& c, tcp::socket s) {
      const auto peer = detail::peer_of(s);
      spawn(c, std::move(s), peer, true);
    });
}

void spawn(worker_context& ctx, tcp::socket socket, const net::address& peer, bool resumed) {
  auto executor = socket.get_executor();
  boost::asio::co_spawn(executor, serve(ctx, std::move(socket), peer, resumed),
                        obs::logged_end{"session ended by exception"});
}

}  // namespace

void start_session(worker_context& ctx, boost::asio::ip::tcp::socket socket, const boost::asio::ip::address& peer) {
  detail::set_client_options(socket);
  spawn(ctx, std::move(socket), net::normalize(peer), false);
}

}  // namespace fg::http
