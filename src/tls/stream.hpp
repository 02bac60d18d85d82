#pragma once
// A TLS connection accepted by the TLS listener: its socket and its channel, as one
// stream for the session (async_read_some / async_write_some / async_handshake).
#include <memory>

#include "tls/channel.hpp"

namespace fg::tls {

class stream {
 public:
  using executor_type = tcp_socket::executor_type;
  using lowest_layer_type = tcp_socket;

  // The server's side of a connection accepted on `socket`, a connection of `ctx`.
  stream(tcp_socket socket, SSL_CTX* ctx) : socket_(std::move(socket)), ch_(SSL_new(ctx), socket_, true) {}
  stream(stream&& o) noexcept : socket_(std::move(o.socket_)), ch_(std::move(o.ch_)) {}
  stream& operator=(stream&&) = delete;

  tcp_socket& next_layer() { return socket_; }
  tcp_socket& lowest_layer() { return socket_; }
  SSL* native_handle() const { return ch_.native_handle(); }
  executor_type get_executor() { return socket_.get_executor(); }
  // See channel::holds_input.
  bool holds_input() const { return ch_.holds_input(); }
  void release_buffers() { ch_.release_buffers(); }
  void send_close_notify() { ch_.send_close_notify(); }
  // See channel::read_close_notify.
  bool read_close_notify() { return socket_.is_open() && ch_.read_close_notify(); }

  // (only for a stream with an SSL object: see native_handle)
  template <class Token>
  auto async_handshake(Token&& token) {
    return ch_.async_handshake(socket_, std::forward<Token>(token));
  }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return ch_.async_read_some(socket_, first_buffer(buffers), std::forward<Token>(token));
  }

  // A head and the first piece of its body go as one record where they fit in one.
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    std::unique_ptr<char[]> scratch;
    const auto one = tls::gather(buffers, scratch);
    return ch_.async_write_some(socket_, one, std::move(scratch), std::forward<Token>(token));
  }

 private:
  tcp_socket socket_;
  channel ch_;
};

}  // namespace fg::tls
