#pragma once
// OpenSSL over a non-blocking TCP socket, as nginx drives it: OpenSSL reads and writes
// the descriptor itself (SSL_set_fd), and an operation waits for the socket's readiness
// when OpenSSL says WANT_READ or WANT_WRITE. No buffer of our own between the socket and
// OpenSSL (Asio's ssl::stream keeps two of 17 KiB per connection and a BIO pair of two
// more, and copies every byte through them): an idle connection holds the SSL object
// and what OpenSSL keeps, which SSL_MODE_RELEASE_BUFFERS gives back between records.
#include <boost/asio/buffer.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

namespace fg::tls {

using error_code = boost::system::error_code;
using tcp_socket = boost::asio::ip::tcp::socket;

// OpenSSL's errors (ERR_get_error's codes), and a peer certificate's verification
// result (X509_V_ERR_*, its own category so that its message names the reason).
const boost::system::error_category& category();
const boost::system::error_category& verify_category();

// OpenSSL's queued errors, the most specific first, as one line (clears the queue).
std::string openssl_errors();

// What a failed OpenSSL call on `ssl` comes to: the socket's errno, an end of stream, a
// failed verification of the peer, or OpenSSL's own error. Clears OpenSSL's error queue.
error_code error_of(SSL* ssl, int ssl_error);

// One connection's TLS state over a socket the owner keeps: every operation is given
// that socket. Moves with its owner; frees the SSL object at its end.
class channel {
 public:
  channel() = default;
  // `ssl` (owned from now on) on `socket`, made non-blocking: the server's side of an
  // accepted connection, or the client's of one just connected.
  channel(SSL* ssl, tcp_socket& socket, bool server);
  channel(channel&& o) noexcept : ssl_(std::exchange(o.ssl_, nullptr)) {}
  channel& operator=(channel&& o) noexcept {
    std::swap(ssl_, o.ssl_);
    return *this;
  }
  // Without a word to the peer: its session stays resumable (OpenSSL marks one that ends
  // without a shutdown unusable; a fatal error has marked it already).
  ~channel() {
    if (!ssl_) return;
    SSL_set_quiet_shutdown(ssl_, 1);
    SSL_shutdown(ssl_);
    SSL_free(ssl_);
  }

  explicit operator bool() const { return ssl_ != nullptr; }
  SSL* native_handle() const { return ssl_; }
  // OpenSSL holds bytes of the peer's that the socket no longer shows (a record read
  // whole, or decrypted data not yet taken): a wait for readability would not see them.
  bool holds_input() const { return ssl_ && SSL_has_pending(ssl_) == 1; }
  // Gives OpenSSL's record buffers back while the connection idles (a read that found
  // nothing keeps its 17 KiB buffer otherwise, SSL_MODE_RELEASE_BUFFERS or not).
  void release_buffers() {
    if (ssl_) SSL_free_buffers(ssl_);
  }
  // Sends close_notify, once, without waiting (a socket whose buffer is full sends none):
  // the end of a response its closing delimits (an HTTP/1.0 client's) is then told from
  // a truncation. Before the TCP half-close.
  void send_close_notify();
  // Reads what the peer has sent, without waiting: true when it was its close_notify
  // (nothing can follow it). Anything else read is dropped: for a connection closing.
  bool read_close_notify();

  // Completes with (error_code, 0).
  template <class Token>
  auto async_handshake(tcp_socket& s, Token&& token) {
    return drive(s, [this](std::size_t& n) {
      n = 0;
      return SSL_do_handshake(ssl_);
    }, std::forward<Token>(token));
  }

  template <class Token>
  auto async_read_some(tcp_socket& s, boost::asio::mutable_buffer to, Token&& token) {
    return drive(s, [this, to](std::size_t& n) {
      return to.size() == 0 ? (n = 0, 1) : SSL_read_ex(ssl_, to.data(), to.size(), &n);
    }, std::forward<Token>(token));
  }

  // All of `from` (OpenSSL takes a write whole, in records of at most 16 KiB). `keep`
  // holds what `from` points into, if anything, until the write completes: a write that
  // waits must be tried again with the same bytes.
  template <class Token>
  auto async_write_some(tcp_socket& s, boost::asio::const_buffer from, std::unique_ptr<char[]> keep, Token&& token) {
    return drive(s, [this, from, keep = std::move(keep)](std::size_t& n) {
      return from.size() == 0 ? (n = 0, 1) : SSL_write_ex(ssl_, from.data(), from.size(), &n);
    }, std::forward<Token>(token));
  }

 private:
  // Calls `attempt` until OpenSSL no longer wants the socket, waiting for readability or
  // writability in between. An operation that completes without waiting completes
  // through a post, as Asio's own do: a peer that sends many records at once must not
  // nest one coroutine resumption inside another.
  template <class Attempt, class Token>
  auto drive(tcp_socket& s, Attempt attempt, Token&& token);

  SSL* ssl_ = nullptr;
};

// channel::drive's steps (see there).
template <class Attempt>
struct drive_op {
  drive_op(SSL* s, tcp_socket* sock, Attempt a) : ssl(s), socket(sock), attempt(std::move(a)) {}
  SSL* ssl;
  tcp_socket* socket;
  Attempt attempt;
  bool waited = false, done = false;
  error_code result;
  std::size_t n = 0;

  template <class Self>
  void operator()(Self& self, error_code ec = {}) {
    if (done) return self.complete(result, n);
    if (ec) return self.complete(ec, 0);
    // OpenSSL holds the descriptor's number, not the socket: once the socket is closed
    // (a tunnel's other side failed) the number may be another connection's already.
    if (!socket->is_open()) return self.complete(boost::asio::error::bad_descriptor, 0);
    ERR_clear_error();
    const int r = attempt(n);
    if (r == 1) {
      result = {};
    } else {
      const int e = SSL_get_error(ssl, r);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        waited = true;
        return socket->async_wait(e == SSL_ERROR_WANT_READ ? tcp_socket::wait_read : tcp_socket::wait_write,
                                  std::move(self));
      }
      result = error_of(ssl, e);
      n = 0;
    }
    if (waited) return self.complete(result, n);
    done = true;
    boost::asio::post(std::move(self));
  }
};

template <class Attempt, class Token>
auto channel::drive(tcp_socket& s, Attempt attempt, Token&& token) {
  return boost::asio::async_compose<Token, void(error_code, std::size_t)>(
      drive_op<Attempt>(ssl_, &s, std::move(attempt)), token, s);
}

// The first non-empty buffer of a sequence (a read fills one at a time).
template <class MutableBuffers>
boost::asio::mutable_buffer first_buffer(const MutableBuffers& buffers) {
  for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers); ++it)
    if (it->size() != 0) return *it;
  return {};
}

// The buffers as one where there are several and they fit in a TLS record, copied to
// `scratch` (which must live until the write completes), else the first non-empty one:
// a head and the first piece of its body go as one record.
template <class ConstBuffers>
boost::asio::const_buffer gather(const ConstBuffers& buffers, std::unique_ptr<char[]>& scratch) {
  boost::asio::const_buffer one;
  std::size_t total = 0, count = 0;
  // (each buffer taken by value: not every sequence's iterator has operator->)
  for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers); ++it)
    if (const boost::asio::const_buffer b = *it; b.size() != 0) {
      if (count++ == 0) one = b;
      total += b.size();
    }
  if (count < 2 || total > 16 * 1024) return one;
  scratch = std::make_unique_for_overwrite<char[]>(total);
  std::size_t at = 0;
  for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers); ++it) {
    const boost::asio::const_buffer b = *it;
    if (b.size() == 0) continue;
    std::memcpy(scratch.get() + at, b.data(), b.size());
    at += b.size();
  }
  return {scratch.get(), total};
}

}  // namespace fg::tls
