#include "http/tls.hpp"

#include <boost/asio/ssl/context.hpp>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>

#include "tls/channel.hpp"
#include "tls/client_context.hpp"
#include "util/text.hpp"

namespace fg::http {

namespace ssl = boost::asio::ssl;
using tls::openssl_errors;

struct tls_server::entry {
  ssl::context ctx{ssl::context::tls_server};
  std::vector<std::string> names;
};

namespace {

// Session tickets' keys, the process's own (not a context's): tickets outlive a reload,
// which builds new contexts. A new key every `rotation`; tickets of the key before are
// still taken (and renewed under the new one), older ones are not: a ticket, and so a
// session's secrets, is readable for at most two rotations.
class ticket_keys {
 public:
  static constexpr std::chrono::hours rotation{1};

  struct key {
    std::array<unsigned char, 16> name;
    std::array<unsigned char, 32> aes, hmac;
  };

  static ticket_keys& instance() {
    static ticket_keys k;
    return k;
  }

  // The key to encrypt with now; false if none could be made.
  bool current(key& out) {
    std::lock_guard l(mu_);
    rotate();
    if (!made_) return false;
    out = keys_[0];
    return true;
  }
  // The key named `name`: 1 the current one, 2 the one before (renew the ticket), 0 none.
  int find(const unsigned char* name, key& out) {
    std::lock_guard l(mu_);
    rotate();  // (a quiet server's old key ages out too)
    if (made_ && std::memcmp(name, keys_[0].name.data(), 16) == 0) return out = keys_[0], 1;
    if (has_previous_ && std::memcmp(name, keys_[1].name.data(), 16) == 0) return out = keys_[1], 2;
    return 0;
  }

 private:
  // A new key when the current one is `rotation` old (under mu_).
  void rotate() {
    const auto now = std::chrono::steady_clock::now();
    if (!made_ || now - made_at_ >= rotation) {
      key fresh;
      if (RAND_bytes(fresh.name.data(), fresh.name.size()) != 1 || RAND_bytes(fresh.aes.data(), fresh.aes.size()) != 1 ||
          RAND_bytes(fresh.hmac.data(), fresh.hmac.size()) != 1)
        return;  // (tried again at the next ticket)
      // Past two rotations the old one goes too.
      has_previous_ = made_ && now - made_at_ < 2 * rotation;
      keys_[1] = keys_[0];
      keys_[0] = fresh;
      made_ = true;
      made_at_ = now;
    }
  }

  std::mutex mu_;
  key keys_[2];
  bool made_ = false, has_previous_ = false;
  std::chrono::steady_clock::time_point made_at_;
};

// OpenSSL's ticket callback (SSL_CTX_set_tlsext_ticket_key_evp_cb), with ticket_keys.
int ticket_key_cb(SSL* ssl, unsigned char* name, unsigned char* iv, EVP_CIPHER_CTX* cctx, EVP_MAC_CTX* hctx, int enc) {
  ticket_keys::key k;
  int found = 1;
  if (enc) {
    // (no key or no IV: no ticket, the handshake goes on)
    if (!ticket_keys::instance().current(k) || RAND_bytes(iv, EVP_MAX_IV_LENGTH) != 1) return 0;
    std::memcpy(name, k.name.data(), 16);
  } else if (!(found = ticket_keys::instance().find(name, k))) {
    return 0;  // not ours, or too old: a full handshake
  } else if (SSL_version(ssl) == TLS1_3_VERSION) {
    // A TLS 1.3 resumption gets a new ticket only when told to renew, and a client uses a
    // ticket once: without a new one, every other connection of its would be a full handshake.
    found = 2;
  }
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, k.hmac.data(), k.hmac.size()),
                         OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_construct_end()};
  if (EVP_MAC_CTX_set_params(hctx, params) != 1) return -1;
  const int ok = enc ? EVP_EncryptInit_ex(cctx, EVP_aes_256_cbc(), nullptr, k.aes.data(), iv)
                     : EVP_DecryptInit_ex(cctx, EVP_aes_256_cbc(), nullptr, k.aes.data(), iv);
  if (ok != 1) return -1;
  return found;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The DNS names of the certificate's subjectAltName, else its CN.
std::vector<std::string> names_of(X509* cert) {
  std::vector<std::string> out;
  if (!cert) return out;
  if (auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr))) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(sans, i);
      if (n->type != GEN_DNS) continue;
      const auto* data = ASN1_STRING_get0_data(n->d.dNSName);
      out.push_back(lower(std::string(reinterpret_cast<const char*>(data), ASN1_STRING_length(n->d.dNSName))));
    }
    GENERAL_NAMES_free(sans);
  }
  if (out.empty()) {
    char cn[256];
    if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn) > 0)
      out.push_back(lower(cn));
  }
  return out;
}

constexpr unsigned char alpn_http11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
// h2 first: a client offering both gets HTTP/2 (RFC 7301: the server's preference).
constexpr unsigned char alpn_h2_http11[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};

// `arg`: non-null when h2 is offered (http2.tls).
int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned inlen,
                void* arg) {
  unsigned char* chosen = nullptr;
  const bool h2 = arg != nullptr;
  if (SSL_select_next_proto(&chosen, outlen, h2 ? alpn_h2_http11 : alpn_http11,
                            h2 ? sizeof alpn_h2_http11 : sizeof alpn_http11, in, inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_ALERT_FATAL;  // no_application_protocol: it offers only what we do not speak
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

tls_server::~tls_server() = default;

bool tls_server::chose_h2(void* ssl) {
  const unsigned char* p = nullptr;
  unsigned n = 0;
  SSL_get0_alpn_selected(static_cast<SSL*>(ssl), &p, &n);
  return n == 2 && p[0] == 'h' && p[1] == '2';
}

std::string tls_server::client_subject(void* handle) {
  auto* s = static_cast<SSL*>(handle);
  X509* cert = SSL_get0_peer_certificate(s);
  if (!cert || SSL_get_verify_result(s) != X509_V_OK) return {};
  BIO* bio = BIO_new(BIO_s_mem());
  if (!bio) return {};
  X509_NAME_print_ex(bio, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<std::size_t>(std::max(0L, n)));
  BIO_free(bio);
  return out;
}

SSL_CTX* tls_server::context() const { return entries_.front()->ctx.native_handle(); }

std::vector<std::vector<std::string>> tls_server::names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& e : entries_) out.push_back(e->names);
  return out;
}

std::size_t tls_server::choose(std::string_view server_name) const {
  const auto want = lower(std::string(server_name));
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (std::find(entries_[i]->names.begin(), entries_[i]->names.end(), want) != entries_[i]->names.end()) return i;
  // "*.example.com" stands for one label: a.example.com, not a.b.example.com nor example.com.
  const auto dot = want.find('.');
  if (dot != std::string::npos && dot > 0) {
    const auto wildcard = "*" + want.substr(dot);
    for (std::size_t i = 0; i < entries_.size(); ++i)
      if (std::find(entries_[i]->names.begin(), entries_[i]->names.end(), wildcard) != entries_[i]->names.end())
        return i;
  }
  return 0;
}

std::shared_ptr<const tls_server> tls_server::build(const config::tls_config& cfg, bool h2, std::string& error) {
  std::shared_ptr<tls_server> out(new tls_server);
  // Sessions resume only under the client-certificate settings they were made under: a
  // resumed session keeps the certificate its first handshake verified, so a reload that
  // drops a CA, or requires certificates, must not let old tickets in (the ticket keys
  // outlive reloads). The context is a digest of those settings.
  unsigned char session_context[SHA256_DIGEST_LENGTH];
  {
    std::string settings = "floodgate";
    if (!cfg.client_ca.empty()) {
      std::ifstream in(cfg.client_ca, std::ios::binary);
      settings += cfg.clients_optional ? "|optional|" : "|required|";
      settings.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    SHA256(reinterpret_cast<const unsigned char*>(settings.data()), settings.size(), session_context);
  }
  for (const auto& c : cfg.certificates) {
    auto e = std::make_unique<entry>();
    SSL_CTX* ctx = e->ctx.native_handle();
    ERR_clear_error();
    auto fail = [&](const std::string& what, const std::string& file) {
      error = c.where + ": tls certificate " + what + " " + file + ": " + openssl_errors();
      return nullptr;
    };
    if (SSL_CTX_use_certificate_chain_file(ctx, c.cert.c_str()) != 1) return fail("cert", c.cert);
    if (SSL_CTX_use_PrivateKey_file(ctx, c.key.c_str(), SSL_FILETYPE_PEM) != 1) return fail("key", c.key);
    if (SSL_CTX_check_private_key(ctx) != 1) return fail("key (not the certificate's)", c.key);
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    if (SSL_CTX_set_cipher_list(ctx, cfg.ciphers.c_str()) != 1) {
      error = "tls.ciphers '" + cfg.ciphers + "': " + openssl_errors();
      return nullptr;
    }
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_read_ahead(ctx, 1);  // (a read per flight of records, not one per header and per body)
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    SSL_CTX_sess_set_cache_size(ctx, 20'000);
    SSL_CTX_set_session_id_context(ctx, session_context, sizeof session_context);
    // TLS 1.3: one ticket per full handshake (OpenSSL's default of two costs a second
    // ticket's encryption and session copy on every new connection; a client resumes with one).
    SSL_CTX_set_num_tickets(ctx, 1);
    SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_key_cb);
    SSL_CTX_set_alpn_select_cb(ctx, select_alpn, h2 ? const_cast<unsigned char*>(alpn_h2_http11) : nullptr);
    if (!cfg.client_ca.empty()) {
      // Client certificates (mTLS): asked for with the CA's names, verified against it.
      STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(cfg.client_ca.c_str());
      if (!names || SSL_CTX_load_verify_locations(ctx, cfg.client_ca.c_str(), nullptr) != 1) {
        if (names) sk_X509_NAME_pop_free(names, X509_NAME_free);
        error = "tls.client_ca " + cfg.client_ca + ": " + openssl_errors();
        return nullptr;
      }
      SSL_CTX_set_client_CA_list(ctx, names);
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (cfg.clients_optional ? 0 : SSL_VERIFY_FAIL_IF_NO_PEER_CERT), nullptr);
      SSL_CTX_set_verify_depth(ctx, 8);
    }
    e->names = names_of(SSL_CTX_get0_certificate(ctx));
    out->entries_.push_back(std::move(e));
  }
  if (out->entries_.empty()) {
    error = "tls: no certificate";
    return nullptr;
  }
  // SNI, on the default context (where every handshake starts): the context of the
  // certificate for the name asked for. Sessions and tickets stay the default's.
  if (out->entries_.size() > 1) {
    SSL_CTX* first = out->entries_.front()->ctx.native_handle();
    SSL_CTX_set_tlsext_servername_arg(first, out.get());
    SSL_CTX_set_tlsext_servername_callback(first, +[](SSL* s, int*, void* arg) -> int {
      const auto* self = static_cast<const tls_server*>(arg);
      const char* name = SSL_get_servername(s, TLSEXT_NAMETYPE_host_name);
      if (!name) return SSL_TLSEXT_ERR_OK;
      const auto i = self->choose(name);
      if (i != 0) SSL_set_SSL_CTX(s, self->entries_[i]->ctx.native_handle());
      return SSL_TLSEXT_ERR_OK;
    });
  }
  return out;
}

std::optional<tls_contexts> tls_contexts::read(const config::config& cfg, std::vector<std::string>& errors) {
  tls_contexts out;
  const auto before = errors.size();
  std::string error;
  if (cfg.tls.listen && !(out.listener = tls_server::build(cfg.tls, cfg.http2.tls, error))) errors.push_back(error);
  for (const auto& u : cfg.upstreams) {
    out.upstreams.emplace_back();
    if (!u.tls.enabled) continue;
    if (!(out.upstreams.back() = tls::client_context::build(u.tls, u.name, error, u.proto == config::upstream_config::protocol::h2))) errors.push_back(error);
  }
  if (errors.size() != before) return std::nullopt;
  return out;
}

}  // namespace fg::http
