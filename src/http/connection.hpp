#pragma once
// A downstream connection's own parts, apart from what its requests do with them: the
// stream (a TCP socket, a TLS stream over one, or a test stream), the buffer its bytes
// are read into, its deadline entry on the worker's board, and its place under
// http.max_connections. What reads requests from it and answers them is http::detail::
// session (session_impl.hpp); between requests an idle connection is parked (parked.hpp)
// with its stream, its entry and its place, and nothing else.
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <chrono>
#include <concepts>
#include <type_traits>

#include "deadline/board.hpp"
#include "http/worker_context.hpp"

namespace fg::http::detail {

using tcp = boost::asio::ip::tcp;
using error_code = boost::system::error_code;

// What a connection asks of its stream beyond reading and writing. A socket, and a TLS
// stream over one (tls::stream, the TLS listener's), have idle waits with no buffer
// (lean), parking, tunnels, deadlines (the sweeper cancels the socket) and deferred
// reads; a test stream has reads and writes, and close().
template <class Stream>
inline constexpr bool is_socket = std::is_same_v<Stream, tcp::socket>;
template <class Stream>
inline constexpr bool is_tls = requires(Stream& s) {
  { s.next_layer() } -> std::same_as<tcp::socket&>;
  s.native_handle();
};
template <class Stream>
tcp::socket* socket_of(Stream& s) {
  if constexpr (is_socket<Stream>) return &s;
  else if constexpr (is_tls<Stream>) return &s.next_layer();
  else return nullptr;
}
// OpenSSL holds bytes of the peer's that a wait for the socket's readability would not see.
template <class Stream>
bool holds_input(const Stream& s) {
  if constexpr (is_tls<Stream>) return s.holds_input();
  else return false;
}
// Ends our sending side (a socket's half-close; under TLS, the TCP one: the response
// is framed, and a close_notify would need a write of its own).
template <class Stream>
void half_close(Stream& s, error_code& ec) {
  if constexpr (is_socket<Stream>) s.shutdown(tcp::socket::shutdown_send, ec);
  else if constexpr (is_tls<Stream>) {
    s.send_close_notify();
    s.next_layer().shutdown(tcp::socket::shutdown_send, ec);
  } else {
    s.close();
  }
}
template <class Stream>
void close_stream(Stream& s) {
  error_code ec;
  if constexpr (is_socket<Stream>) s.close(ec);
  else if constexpr (is_tls<Stream>) s.next_layer().close(ec);
  else s.close();
}

// One downstream connection while a session serves it. Pinned (neither copied nor
// moved): its entry names its own stream's socket, and is off the board before that
// socket is destroyed (members are destroyed in reverse order). release() gives the
// stream and the place up to be parked; the entry stays here, and goes with it.
template <class Stream>
class connection {
 public:
  // A head must fit in what the buffer grows to (read_head widens it for larger ones).
  static constexpr std::size_t buffer_max = 64 * 1024;

  connection(worker_context& ctx, Stream stream, connection_slot slot)
      : stream_(std::move(stream)), buffer_(buffer_max), watch_(ctx.deadlines.open(socket_of(stream_))),
        slot_(std::move(slot)) {}
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  Stream& stream() { return stream_; }
  const Stream& stream() const { return stream_; }
  boost::beast::flat_buffer& buffer() { return buffer_; }
  // The current wait's deadline and state (deadline::entry's named operations).
  deadline::entry& watch() { return *watch_; }
  const deadline::entry& watch() const { return *watch_; }

  // The stream and the place, for parking: this connection is done with them.
  struct released {
    Stream stream;
    connection_slot slot;
    std::chrono::steady_clock::time_point idle_deadline;
  };
  released release() { return {std::move(stream_), std::move(slot_), watch_->deadline()}; }

 private:
  Stream stream_;
  boost::beast::flat_buffer buffer_;
  deadline::board::watch watch_;  // (after stream_: gone from the board before it)
  connection_slot slot_;
};

}  // namespace fg::http::detail
