#pragma once
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>

#include "deadline/board.hpp"

namespace fg::http {

struct tunnel_stats {
  std::uint64_t down_to_up = 0;
  std::uint64_t up_to_down = 0;
};

// Copies bytes both ways until both sides have closed (half-close is passed on) or
// neither side has moved a byte for `idle` (the session's deadline). Bytes already
// buffered on either side go first. With `renew`, it is called every `renew_every`
// while the tunnel lasts (a concurrency lease outliving its lifetime).
// Down: the session's stream (tcp::socket or tls::stream); Up: upstream::connection.
template <class Down, class Up>
boost::asio::awaitable<tunnel_stats> run_tunnel(deadline::entry& session, Down& down,
                                                boost::beast::flat_buffer& down_buf, Up& up,
                                                boost::beast::flat_buffer& up_buf, std::chrono::milliseconds idle,
                                                std::function<void()> renew = {},
                                                std::chrono::milliseconds renew_every = {});

}  // namespace fg::http
