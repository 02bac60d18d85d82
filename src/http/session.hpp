#pragma once
#include <boost/asio/ip/tcp.hpp>

#include "http/worker_context.hpp"

namespace fg::http {

// Serves one downstream connection for its whole life on the worker that accepted it:
// reads requests (pipelined ones in order), answers or forwards them upstream,
// streams both bodies, and tunnels upgraded connections. Between requests, a
// keep-alive connection idle for a while is parked: it then holds its socket and one
// wait for readability, and gets a new session when its next request arrives.
// `peer`: the address accept() gave (normalized here).
// `slot`: its place under http.max_connections, held until the connection ends.
void start_session(worker_context& ctx, boost::asio::ip::tcp::socket socket, const boost::asio::ip::address& peer,
                   connection_slot slot);
// The same for a connection to the TLS listener (ctx.rt->tls.listener): its handshake
// first, within tls.handshake_timeout and among at most tls.max_handshakes at once on the
// worker (past it, the connection is closed at once); then sessions over the TLS stream,
// parked between requests as plain connections are.
void start_tls_session(worker_context& ctx, boost::asio::ip::tcp::socket socket,
                       const boost::asio::ip::address& peer, connection_slot slot);

}  // namespace fg::http
