#include "http/session.hpp"

#include <boost/asio/co_spawn.hpp>
#include <spdlog/spdlog.h>

#include <optional>

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

// A keep-alive connection between requests, idle past deadline::lean_after: its socket, its
// deadline entry, and one wait for readability; no session, frame or buffer. Readable,
// it gets a new session; past idle_timeout or on drain it is closed.
struct parked {
  worker_context& ctx;
  tcp::socket socket;
  deadline::board::watch entry;

  parked(worker_context& c, tcp::socket s) : ctx(c), socket(std::move(s)), entry(ctx.deadlines.open(&socket)) {
    entry->lean = true;  // already lean: the sweeper only watches its deadline
    ++ctx.parked;
  }
  ~parked() {
    --ctx.parked;
    if (socket.is_open() && ctx.connections) ctx.connections->open.fetch_sub(1, std::memory_order_relaxed);
  }
};

void spawn(worker_context& ctx, tcp::socket socket, bool resumed);

void park(worker_context& ctx, tcp::socket socket, std::chrono::steady_clock::time_point deadline) {
  auto p = std::make_unique<parked>(ctx, std::move(socket));
  p->entry->arm_at(deadline);
  auto& s = p->socket;
  s.async_wait(tcp::socket::wait_read, [p = std::move(p)](error_code ec) mutable {
    // Timed out, drained or reset: ~parked closes it and gives its count back.
    if (ec || p->entry->expired || p->ctx.draining) return;
    auto& ctx = p->ctx;
    auto socket = std::move(p->socket);
    p.reset();
    spawn(ctx, std::move(socket), true);
  });
}

boost::asio::awaitable<void> serve(worker_context& ctx, tcp::socket socket, bool resumed) {
  std::optional<tcp::socket> idle;
  std::chrono::steady_clock::time_point deadline;
  {
    error_code ec;
    net::address peer;
    if (auto ep = socket.remote_endpoint(ec); !ec) peer = net::normalize(ep.address());
    socket.set_option(tcp::no_delay(true), ec);
    detail::session<tcp::socket> s(ctx, std::move(socket), peer, resumed);
    // (GCC 12: no co_await inside a condition.)
    const bool to_park = co_await s.run();
    if (to_park) {
      deadline = s.idle_deadline();
      idle.emplace(s.release_socket());
    }
  }
  if (idle) park(ctx, std::move(*idle), deadline);
}

void spawn(worker_context& ctx, tcp::socket socket, bool resumed) {
  auto executor = socket.get_executor();
  boost::asio::co_spawn(executor, serve(ctx, std::move(socket), resumed), obs::logged_end{"session ended by exception"});
}

}  // namespace

void start_session(worker_context& ctx, boost::asio::ip::tcp::socket socket) {
  spawn(ctx, std::move(socket), false);
}

}  // namespace fg::http
