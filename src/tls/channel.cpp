#include "tls/channel.hpp"

#include <boost/asio/ssl/error.hpp>

#include <openssl/err.h>
#include <openssl/x509.h>

#include <cerrno>
#include <string>

namespace fg::tls {

namespace {

struct openssl_category : boost::system::error_category {
  const char* name() const noexcept override { return "tls"; }
  std::string message(int ev) const override {
    char buf[256];
    ERR_error_string_n(static_cast<unsigned long>(ev), buf, sizeof buf);
    return buf;
  }
};

struct x509_category : boost::system::error_category {
  const char* name() const noexcept override { return "tls verify"; }
  std::string message(int ev) const override {
    return std::string("certificate verify failed: ") + X509_verify_cert_error_string(ev);
  }
};

}  // namespace

const boost::system::error_category& category() {
  static const openssl_category c;
  return c;
}

const boost::system::error_category& verify_category() {
  static const x509_category c;
  return c;
}

std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out = out.empty() ? std::string(buf) : std::string(buf) + "; " + out;
  }
  return out.empty() ? "unknown error" : out;
}

error_code error_of(SSL* ssl, int ssl_error) {
  if (ssl_error == SSL_ERROR_ZERO_RETURN) {
    ERR_clear_error();
    return boost::asio::error::eof;
  }
  if (ssl_error == SSL_ERROR_SYSCALL) {
    const int err = errno;
    ERR_clear_error();
    return err ? error_code(err, boost::system::system_category()) : error_code(boost::asio::error::eof);
  }
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  // The peer closed without close_notify where that was not allowed (an upstream's end
  // of stream: a close-delimited body cut short reads as this, never as its end).
  if (ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING) return boost::asio::ssl::error::stream_truncated;
  // A handshake the peer's certificate failed: the reason, not "certificate verify failed".
  if (ssl) {
    const long v = SSL_get_verify_result(ssl);
    if (v != X509_V_OK && ERR_GET_REASON(e) == SSL_R_CERTIFICATE_VERIFY_FAILED)
      return error_code(static_cast<int>(v), verify_category());
  }
  return error_code(static_cast<int>(e ? e : 1), category());
}

void channel::send_close_notify() {
  if (!ssl_ || (SSL_get_shutdown(ssl_) & SSL_SENT_SHUTDOWN)) return;
  ERR_clear_error();
  (void)SSL_shutdown(ssl_);
  ERR_clear_error();
}

bool channel::read_close_notify() {
  if (!ssl_) return false;
  char sink[512];
  std::size_t n = 0;
  ERR_clear_error();
  const int r = SSL_read_ex(ssl_, sink, sizeof sink, &n);
  const bool closed = r <= 0 && SSL_get_error(ssl_, r) == SSL_ERROR_ZERO_RETURN;
  ERR_clear_error();
  return closed;
}

channel::channel(SSL* ssl, tcp_socket& socket, bool server) : ssl_(ssl) {
  error_code ec;
  socket.native_non_blocking(true, ec);
  if (!ssl_) return;
  SSL_set_fd(ssl_, socket.native_handle());
  if (server) SSL_set_accept_state(ssl_);
  else SSL_set_connect_state(ssl_);
}

}  // namespace fg::tls
