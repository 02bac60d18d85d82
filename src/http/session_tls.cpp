#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <spdlog/spdlog.h>

#include "http/session.hpp"
#include "http/session_read.ipp"
#include "http/session_upstream.ipp"
#include "obs/logging.hpp"

// The session over TLS (the TLS listener's connections), in a file of its own: the
// session's code compiled for a second stream type, beside session.cpp's.
namespace fg::http::detail {
using tls_stream = boost::asio::ssl::stream<tcp::socket>;
template class session<tls_stream>;
}  // namespace fg::http::detail

namespace fg::http {

namespace {

using detail::error_code;
using detail::tcp;
using detail::tls_stream;

// Logged at most every 5 s, with the count since the last line.
void note(std::uint64_t& count, std::int64_t& last_ms, const char* what, unsigned worker) {
  ++count;
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(deadline::coarse_now.time_since_epoch()).count();
  if (now - last_ms < 5000) return;
  last_ms = now;
  spdlog::warn("worker {}: {} TLS connection(s) {} so far", worker, count, what);
}

boost::asio::awaitable<void> serve_tls(worker_context& ctx, tcp::socket socket, std::shared_ptr<const tls_server> tls) {
  error_code ec;
  net::address peer;
  if (auto ep = socket.remote_endpoint(ec); !ec) peer = net::normalize(ep.address());
  socket.set_option(tcp::no_delay(true), ec);
  tls_stream stream(std::move(socket), tls->context());
  bool shaken = false;
  {
    // The handshake is bounded as a request head is: the sweeper closes it at its time.
    auto watch = ctx.deadlines.open(&stream.next_layer());
    watch->arm(ctx.rt->cfg->tls.handshake_timeout);
    auto [hec] = co_await stream.async_handshake(boost::asio::ssl::stream_base::server,
                                                 boost::asio::as_tuple(boost::asio::use_awaitable));
    --ctx.handshakes;
    shaken = !hec && !watch->expired;
    if (!shaken) {
      static thread_local std::int64_t last = 0;
      spdlog::debug("{}: TLS handshake failed: {}", peer.to_string(), watch->expired ? "timed out" : hec.message());
      note(ctx.handshakes_failed, last, "failed their handshake (or timed out)", ctx.id);
    }
  }
  if (!shaken) {
    stream.next_layer().close(ec);
    if (ctx.connections) ctx.connections->open.fetch_sub(1, std::memory_order_relaxed);
    co_return;
  }
  auto subject = tls_server::client_subject(stream.native_handle());
  detail::session<tls_stream> s(ctx, std::move(stream), peer, false);
  s.set_client_cert(std::move(subject));
  co_await s.run();
}

}  // namespace

void start_tls_session(worker_context& ctx, tcp::socket socket) {
  auto tls = ctx.rt->tls;
  if (!tls || ctx.handshakes >= ctx.rt->cfg->tls.max_handshakes) {
    // A handshake flood must not take the worker from the connections it serves.
    static thread_local std::int64_t last = 0;
    note(ctx.handshakes_refused, last, "refused (tls.max_handshakes handshakes in progress)", ctx.id);
    error_code ec;
    socket.close(ec);
    if (ctx.connections) ctx.connections->open.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  ++ctx.handshakes;
  auto executor = socket.get_executor();
  boost::asio::co_spawn(executor, serve_tls(ctx, std::move(socket), std::move(tls)),
                        obs::logged_end{"TLS session ended by exception"});
}

}  // namespace fg::http
