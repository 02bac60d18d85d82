#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace boost::asio::ssl {
class context;
}
namespace fg::tls {
class client_context;
}
struct ssl_ctx_st;
using SSL_CTX = ssl_ctx_st;

namespace fg::http {

// What the TLS listener serves with: one OpenSSL context per certificate of
// tls.certificates, the first the default, another chosen during the handshake by the
// name the client asks for (SNI: an exact name of a certificate's subjectAltName, or
// else CN, then a wildcard `*.example.com` for one label). TLS 1.2 and 1.3 only, the
// configured TLS 1.2 suites, ALPN h2 (unless http2.tls is off) and http/1.1 (a client that offers only other protocols
// is refused, as nginx does), no renegotiation, no compression, a server-side session
// cache and tickets for resumption, and OpenSSL's buffers given back while a
// connection is idle (SSL_MODE_RELEASE_BUFFERS). Immutable once built: a reload builds
// another from the files as they are then.
class tls_server {
 public:
  ~tls_server();
  tls_server(const tls_server&) = delete;
  tls_server& operator=(const tls_server&) = delete;

  // Reads every certificate and key; null with `error` ("file:line: tls certificate
  // PATH: what OpenSSL says") when one cannot be used.
  // `h2`: ALPN offers h2 before http/1.1 (http2.tls).
  static std::shared_ptr<const tls_server> build(const config::tls_config& cfg, bool h2, std::string& error);

  // The default context, which a new connection starts from.
  SSL_CTX* context() const;
  // The names (lower case) each certificate answers for, in tls.certificates' order.
  std::vector<std::vector<std::string>> names() const;
  // Which certificate a client asking for `server_name` gets (its index).
  std::size_t choose(std::string_view server_name) const;
  // The subject (RFC 2253, "CN=app-1,O=Example") of the client certificate a handshake
  // on `ssl` (an SSL*) verified, "" when it has none.
  static std::string client_subject(void* ssl);
  // Whether the client chose h2 by ALPN in the handshake on `ssl` (an SSL*).
  static bool chose_h2(void* ssl);

 private:
  tls_server() = default;
  struct entry;
  std::vector<std::unique_ptr<entry>> entries_;
};

// Everything TLS a configuration names, read from its files: the listener's certificates
// and each upstream's client side. Read at the start, by --check and at every reload (a
// file that cannot be used fails the reload as a bad configuration does).
struct tls_contexts {
  std::shared_ptr<const tls_server> listener;  // null: no tls.listen
  // By upstream index (null: plain TCP to its servers).
  std::vector<std::shared_ptr<const tls::client_context>> upstreams;

  // Null with every error (one per file that cannot be used) in `errors`.
  static std::optional<tls_contexts> read(const config::config& cfg, std::vector<std::string>& errors);
};

}  // namespace fg::http
