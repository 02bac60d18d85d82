#pragma once
// One connection to an upstream's server: its socket, TLS over it when the upstream has
// `tls:`, and the read buffer that belongs to it. A stream of its own (async_read_some,
// async_write_some), plain or TLS as the connection was made.
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <chrono>
#include <memory>
#include <string_view>

#include "tls/channel.hpp"

namespace fg::tls {
class client_context;
}

namespace fg::upstream {

struct connection {
  using executor_type = boost::asio::ip::tcp::socket::executor_type;
  using error_code = boost::system::error_code;

  explicit connection(boost::asio::any_io_executor ex) : socket(std::move(ex)) {}
  boost::asio::ip::tcp::socket socket;
  tls::channel tls;  // empty: plain TCP
  boost::beast::flat_buffer buffer{64 * 1024};
  bool reused = false;  // came from the idle pool (may have been closed by the peer)
  bool look_on_send = false;  // taken without a look at its socket: its send looks first (send_batch)
  std::chrono::steady_clock::time_point idle_since{};
  std::uint64_t address_id = 0;  // which server address of its upstream it is connected to (see pool)
  std::size_t server = 0;        // that server's position in the upstream's servers

  executor_type get_executor() { return socket.get_executor(); }
  boost::asio::ip::tcp::socket& lowest_layer() { return socket; }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& b) {
          if (!tls) socket.async_read_some(b, std::move(handler));
          else tls.async_read_some(socket, tls::first_buffer(b), std::move(handler));
        },
        token, buffers);
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& b) {
          if (!tls) return socket.async_write_some(b, std::move(handler));
          std::unique_ptr<char[]> scratch;
          const auto one = tls::gather(b, scratch);
          tls.async_write_some(socket, one, std::move(scratch), std::move(handler));
        },
        token, buffers);
  }
};
using connection_ptr = std::unique_ptr<connection>;

// The TLS handshake of a connection just made to a server whose host (the name its
// address came from, else the address) is `host`, resuming `resume` if the server
// takes it: an error (a certificate that fails verification: tls::verify_category,
// its reason) or none.
boost::asio::awaitable<boost::system::error_code> start_tls(connection& c, const tls::client_context& ctx,
                                                            std::string_view host, SSL_SESSION* resume);

// The host part of a server's configured name ("api.internal:9000"), else of its address.
std::string_view host_of(std::string_view name_or_address);

}  // namespace fg::upstream
