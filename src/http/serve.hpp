#pragma once
// What the worker does with a downstream connection, one loop for a plain socket and a
// TLS stream alike: a session while it reads or answers, parked while it idles between
// requests (parked.hpp), a session again when its next bytes come. Instantiated in
// session.cpp (tcp::socket) and session_tls.cpp (tls::stream, after its handshake).
// Beast-heavy: include only from those.
#include <boost/asio/co_spawn.hpp>

#include <optional>

#include "http/connection.hpp"
#include "http/h2.hpp"
#include "http/parked.hpp"
#include "http/session_read.ipp"
#include "http/session_write.ipp"
#include "http/tls.hpp"
#include "obs/logging.hpp"

namespace fg::http::detail {

template <class Stream>
void spawn(worker_context& ctx, Stream stream, connection_slot slot, const net::address& peer, bool resumed);

// The sessions of one connection, and its parking between them. `resumed`: woken from
// parking (it has served a request: an idle close is no 408).
template <class Stream>
asio::awaitable<void> serve(worker_context& ctx, Stream stream, connection_slot slot, net::address peer,
                            bool resumed) {
  std::optional<typename connection<Stream>::released> idle, h2;
  std::string preread, subject;
  {
    if constexpr (is_tls<Stream>) {
      subject = tls_server::client_subject(stream.native_handle());
      // (a parked connection was HTTP/1.1's: HTTP/2 connections are not parked)
      if (!resumed && tls_server::chose_h2(stream.native_handle())) {
        co_await serve_h2(ctx, std::move(stream), std::move(slot), peer, {}, std::move(subject));
        co_return;
      }
    }
    session<Stream> s(ctx, std::move(stream), std::move(slot), peer, resumed);
    if constexpr (is_tls<Stream>) s.set_client_cert(std::move(subject));
    // (GCC 12: no co_await inside a condition.)
    const bool to_park = co_await s.run();
    if (to_park) idle.emplace(s.release());
    else if (s.wants_h2()) preread = s.take_preread(), h2.emplace(s.release());
  }
  if constexpr (is_socket<Stream>) {
    if (h2) co_await serve_h2(ctx, std::move(h2->stream), std::move(h2->slot), peer, std::move(preread), {});
  }
  // (the address is asked for again on the return: kept, it would grow every parked connection)
  if (idle)
    park(ctx, std::move(idle->stream), std::move(idle->slot), idle->idle_deadline,
         [](worker_context& c, Stream s, connection_slot place) {
           const auto again = peer_of(*socket_of(s));
           spawn(c, std::move(s), std::move(place), again, true);
         });
}

template <class Stream>
void spawn(worker_context& ctx, Stream stream, connection_slot slot, const net::address& peer, bool resumed) {
  auto executor = stream.get_executor();
  boost::asio::co_spawn(executor, serve(ctx, std::move(stream), std::move(slot), peer, resumed),
                        obs::logged_end{is_tls<Stream> ? "TLS session ended by exception" : "session ended by exception"});
}

}  // namespace fg::http::detail
