#pragma once
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <chrono>
#include <cstdint>

namespace fg::http {

struct tunnel_stats {
  std::uint64_t down_to_up = 0;
  std::uint64_t up_to_down = 0;
};

// Copies bytes both ways until both sides have closed (half-close is passed on) or
// either side is silent for `idle`. Bytes already buffered on either side go first.
boost::asio::awaitable<tunnel_stats> run_tunnel(boost::beast::tcp_stream& down, boost::beast::flat_buffer& down_buf,
                                                boost::beast::tcp_stream& up, boost::beast::flat_buffer& up_buf,
                                                std::chrono::milliseconds idle);

}  // namespace fg::http
