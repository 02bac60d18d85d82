#pragma once
// The client's side of TLS to an upstream's servers (upstreams.<name>.tls): one OpenSSL
// context per upstream, read from its files when the configuration is; a new SSL object
// per connection, with the name it sends (SNI) and checks, and the session to resume.
#include <openssl/ssl.h>

#include <memory>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace fg::tls {

struct session_free {
  void operator()(SSL_SESSION* s) const { SSL_SESSION_free(s); }
};
// A session a server gave, to resume the next connection to it with.
using session_ptr = std::unique_ptr<SSL_SESSION, session_free>;

class client_context {
 public:
  ~client_context();
  client_context(const client_context&) = delete;
  client_context& operator=(const client_context&) = delete;

  // `h2`: ALPN offers h2 alone (an HTTP/2 upstream), else http/1.1.
  // Reads the CA bundle (else the system's store) and the client certificate; null with
  // `error` ("file:line: upstream NAME tls ...: what OpenSSL says") when one cannot be used.
  static std::shared_ptr<const client_context> build(const config::upstream_tls_config& cfg,
                                                     const std::string& upstream, std::string& error,
                                                     bool h2 = false);

  // A new SSL object for a connection to a server whose host (the name its address came
  // from, else the address) is `host`: tls.server_name, else `host`, is sent as SNI (not
  // an IP address: RFC 6066) and is what the certificate must name when verified.
  // `resume`: a session the server gave before. Null if OpenSSL cannot make one.
  SSL* new_ssl(std::string_view host, SSL_SESSION* resume) const;
  bool verifies() const { return verify_; }

 private:
  client_context() = default;
  SSL_CTX* ctx_ = nullptr;
  std::string server_name_;
  bool verify_ = true;
};

// A session of `ssl` worth keeping for the next connection (null: none, or not resumable).
session_ptr resumable_session(SSL* ssl);

}  // namespace fg::tls
