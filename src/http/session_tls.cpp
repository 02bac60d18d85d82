#include <boost/asio/co_spawn.hpp>
#include <spdlog/spdlog.h>

#include "http/serve.hpp"
#include "http/session.hpp"
#include "tls/stream.hpp"

// The session over TLS (the TLS listener's connections), in a file of its own: the
// session's code compiled for a second stream type, beside session.cpp's (two files
// build at once); the handshake before it. The connection loop is serve.hpp's.
namespace fg::http::detail {
template class session<tls::stream>;
}  // namespace fg::http::detail

namespace fg::http {

namespace {

using detail::error_code;
using detail::tcp;

// Logged at most every 5 s, with the count since the last line.
void note(std::uint64_t& count, std::int64_t& last_ms, const char* what, unsigned worker) {
  ++count;
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(deadline::coarse_now.time_since_epoch()).count();
  if (now - last_ms < 5000) return;
  last_ms = now;
  spdlog::warn("worker {}: {} TLS connection(s) {} so far", worker, count, what);
}

// A handshake flood must not take the worker from the connections it serves, nor keep
// new clients out: at tls.max_handshakes in progress, the oldest is ended (its socket's
// wait cancelled, its entry expired) for the newest. Silent connections then hold a
// place for as long as it takes the flood to open max_handshakes more, while a real
// client's handshake takes milliseconds.
void make_room(worker_context& ctx) {
  if (ctx.handshakes.size() < ctx.rt->cfg->tls.max_handshakes) return;
  auto* oldest = ctx.handshakes.front();
  ctx.handshakes.pop_front();
  oldest->listed = false;
  oldest->watch->expire_now();
  static thread_local std::int64_t last = 0;
  note(ctx.handshakes_refused, last, "ended for newer ones (tls.max_handshakes handshakes in progress)", ctx.id);
}

boost::asio::awaitable<void> handshake(worker_context& ctx, tcp::socket socket, net::address peer,
                                       std::shared_ptr<const tls_server> tls, connection_slot slot) {
  detail::set_client_options(socket);
  error_code ec;
  tls::stream stream(std::move(socket), tls->context());
  bool shaken = false;
  if (stream.native_handle()) {
    // The handshake is bounded as a request head is: the sweeper closes it at its time.
    auto watch = ctx.deadlines.open(&stream.next_layer());
    watch->arm(ctx.rt->cfg->tls.handshake_timeout);
    make_room(ctx);
    worker_context::handshake me{&*watch};
    const auto place = ctx.handshakes.insert(ctx.handshakes.end(), &me);
    auto [hec, n] = co_await stream.async_handshake(util::use_tuple);
    shaken = !hec && !watch->expired();
    if (me.listed) ctx.handshakes.erase(place);
    if (!shaken) {
      static thread_local std::int64_t last = 0;
      if (spdlog::should_log(spdlog::level::debug))
        spdlog::debug("{}: TLS handshake failed: {}", peer.to_string(), watch->expired() ? "timed out" : hec.message());
      note(ctx.handshakes_failed, last, "failed their handshake (or timed out)", ctx.id);
    }
  }
  if (!shaken) {
    stream.next_layer().close(ec);
    co_return;  // (and the slot's place is given back)
  }
  detail::spawn(ctx, std::move(stream), std::move(slot), peer, false);
}

}  // namespace

void start_tls_session(worker_context& ctx, tcp::socket socket, const boost::asio::ip::address& peer,
                       connection_slot slot) {
  auto tls = ctx.rt->tls.listener;
  if (!tls) {
    error_code ec;
    socket.close(ec);
    return;  // (and the slot's place is given back)
  }
  auto executor = socket.get_executor();
  boost::asio::co_spawn(executor,
                        handshake(ctx, std::move(socket), net::normalize(peer), std::move(tls), std::move(slot)),
                        obs::logged_end{"TLS session ended by exception"});
}

}  // namespace fg::http
