#include "tls/client_context.hpp"

#include "tls/channel.hpp"

#include <boost/asio/ip/address.hpp>
#include <openssl/err.h>
#include <openssl/x509v3.h>

namespace fg::tls {

client_context::~client_context() {
  if (ctx_) SSL_CTX_free(ctx_);
}

std::shared_ptr<const client_context> client_context::build(const config::upstream_tls_config& cfg,
                                                            const std::string& upstream, std::string& error,
                                                            bool h2) {
  std::shared_ptr<client_context> out(new client_context);
  ERR_clear_error();
  out->ctx_ = SSL_CTX_new(TLS_client_method());
  auto fail = [&](const std::string& what) {
    error = cfg.where + ": upstream " + upstream + " tls " + what + ": " + openssl_errors();
    return nullptr;
  };
  if (!out->ctx_) return fail("context");
  SSL_CTX* ctx = out->ctx_;
  out->server_name_ = cfg.server_name;
  out->verify_ = cfg.verify;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // (No SSL_OP_IGNORE_UNEXPECTED_EOF: an upstream's close without close_notify is a
  // truncation, stream_truncated, not the end of a body that its closing delimits.)
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_read_ahead(ctx, 1);  // (a read per flight, not one per record header and body)
  // Sessions are kept by the pool, per server (not in OpenSSL's cache, keyed by nothing we know).
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  static constexpr unsigned char alpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'}, alpn_h2[] = {2, 'h', '2'};
  // (0 on success)
  if (h2) SSL_CTX_set_alpn_protos(ctx, alpn_h2, sizeof alpn_h2);
  else SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn);
  if (cfg.verify) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    SSL_CTX_set_verify_depth(ctx, 8);
    if (!cfg.ca.empty()) {
      if (SSL_CTX_load_verify_locations(ctx, cfg.ca.c_str(), nullptr) != 1) return fail("ca " + cfg.ca);
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
      return fail("the system's CA store");
    }
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  if (!cfg.client_cert.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg.client_cert.c_str()) != 1)
      return fail("client_cert " + cfg.client_cert);
    if (SSL_CTX_use_PrivateKey_file(ctx, cfg.client_key.c_str(), SSL_FILETYPE_PEM) != 1)
      return fail("client_key " + cfg.client_key);
    if (SSL_CTX_check_private_key(ctx) != 1) return fail("client_key " + cfg.client_key + " (not the certificate's)");
  }
  return out;
}

SSL* client_context::new_ssl(std::string_view host, SSL_SESSION* resume) const {
  SSL* ssl = SSL_new(ctx_);
  if (!ssl) return nullptr;
  const std::string name(server_name_.empty() ? host : std::string_view(server_name_));
  boost::system::error_code ec;
  boost::asio::ip::make_address(name, ec);
  const bool is_ip = !ec;
  bool ok = true;
  if (!is_ip && !name.empty()) ok = SSL_set_tlsext_host_name(ssl, name.c_str()) == 1;
  if (ok && verify_) {
    if (is_ip) ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) == 1;
    else ok = SSL_set1_host(ssl, name.c_str()) == 1;
  }
  if (ok && resume) SSL_set_session(ssl, resume);
  if (!ok) {
    SSL_free(ssl);
    return nullptr;
  }
  return ssl;
}

session_ptr resumable_session(SSL* ssl) {
  if (!ssl) return nullptr;
  SSL_SESSION* s = SSL_get1_session(ssl);
  if (s && SSL_SESSION_is_resumable(s) != 1) {
    SSL_SESSION_free(s);
    s = nullptr;
  }
  return session_ptr(s);
}

}  // namespace fg::tls
