#pragma once
// A keep-alive connection between requests, idle past deadline::lean_after: its stream
// (a socket, or a socket and its TLS state), its deadline entry and one wait for
// readability; no session, coroutine frame or buffer. Readable, it gets a new session;
// past idle_timeout or on drain it is closed. For the connection loop (serve.hpp).
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <memory>
#include <type_traits>

#include "http/connection.hpp"
#include "http/worker_context.hpp"
#include "net/cidr.hpp"

namespace fg::http::detail {

// A connection's peer, normalized (unspecified if the socket has none any more).
inline net::address peer_of(const boost::asio::ip::tcp::socket& s) {
  boost::system::error_code ec;
  const auto ep = s.remote_endpoint(ec);
  return ec ? net::address() : net::normalize(ep.address());
}

template <class Stream>
struct parked {
  worker_context& ctx;
  Stream stream;
  deadline::board::watch entry;  // (after stream: gone from the board before it)
  connection_slot slot;          // given back when the parked connection is closed

  parked(worker_context& c, Stream s, connection_slot place)
      : ctx(c), stream(std::move(s)), entry(ctx.deadlines.open(socket_of(stream))), slot(std::move(place)) {
    entry->set_lean();  // already lean: the sweeper only watches its deadline
    if constexpr (requires { stream.release_buffers(); }) stream.release_buffers();
    ++ctx.parked;
  }
  ~parked() { --ctx.parked; }
};

// Parks `stream` (holding `slot`) until `deadline`; `resume(ctx, stream, slot)` when it
// is readable.
template <class Stream, class Resume>
void park(worker_context& ctx, Stream stream, connection_slot slot, std::chrono::steady_clock::time_point deadline,
          Resume resume) {
  auto p = std::make_unique<parked<Stream>>(ctx, std::move(stream), std::move(slot));
  p->entry->arm_at(deadline);
  auto& s = *socket_of(p->stream);
  s.async_wait(boost::asio::ip::tcp::socket::wait_read, [p = std::move(p), resume](boost::system::error_code ec) mutable {
    // Timed out, drained or reset: ~parked closes it and gives its place back.
    if (ec || p->entry->expired() || p->ctx.draining) return;
    auto& ctx = p->ctx;
    auto stream = std::move(p->stream);
    auto place = std::move(p->slot);
    p.reset();
    resume(ctx, std::move(stream), std::move(place));
  });
}

}  // namespace fg::http::detail
