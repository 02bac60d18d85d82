#pragma once
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "app/context.hpp"

namespace fg::http {

// Serves one downstream connection for its whole life on the worker that accepted it:
// reads requests (pipelined ones in order), answers or forwards them upstream,
// streams both bodies, and tunnels upgraded connections.
boost::asio::awaitable<void> run_session(app::worker_context& ctx, boost::asio::ip::tcp::socket socket);

}  // namespace fg::http
