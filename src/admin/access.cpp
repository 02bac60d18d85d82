#include "admin/access.hpp"

#include <boost/asio/ip/address.hpp>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>

#include "util/text.hpp"

namespace fg::admin {

namespace {

reply refusal(unsigned status, const std::string& message) {
  // (the message is ours: no character in it needs escaping but quotes, which it avoids)
  return {status, "{\"error\":\"" + message + "\"}", "application/json", {}};
}

// The host part of a Host field: "[::1]:9901" -> "::1", "a.b:9901" -> "a.b", lower case.
std::string host_part(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    host = close == std::string_view::npos ? host.substr(1) : host.substr(1, close - 1);
  } else if (auto colon = host.find(':'); colon != std::string_view::npos && host.find(':', colon + 1) == std::string_view::npos) {
    host = host.substr(0, colon);
  }
  std::string out(host);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  if (!out.empty() && out.back() == '.') out.pop_back();  // "localhost." is localhost
  return out;
}

bool known_host(std::string_view field, const config::admin_config& cfg) {
  const auto host = host_part(field);
  if (host.empty()) return false;
  // An address cannot be re-pointed by DNS: a rebinding attack needs a name.
  boost::system::error_code ec;
  (void)boost::asio::ip::make_address(host, ec);
  if (!ec) return true;
  if (host == "localhost") return true;
  if (cfg.listen && util::iequals(host, cfg.listen->host)) return true;
  return std::find(cfg.hosts.begin(), cfg.hosts.end(), host) != cfg.hosts.end();
}

// What of a client's Host may be echoed in a JSON string: a name's characters, others as '?'.
std::string printable(std::string host) {
  if (host.size() > 64) host = host.substr(0, 64) + "...";
  for (auto& c : host)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':' && c != '_') c = '?';
  return host;
}

bool is_probe(std::string_view path) { return path == "/healthz" || path == "/readyz"; }

}  // namespace

bool privileged(std::string_view path) {
  return path == "/config" || path == "/limits" || path == "/limits/reset" || path == "/limits/grant" ||
         path == "/reload" || path == "/upstreams";
}

bool same_token(std::string_view given, std::string_view token) {
  unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(given.data()), given.size(), a);
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), b);
  return CRYPTO_memcmp(a, b, sizeof a) == 0;
}

std::optional<reply> refuse(const request_facts& r, const config::admin_config& cfg) {
  if (!is_probe(r.path) && r.host && !known_host(*r.host, cfg))
    return refusal(403, "Host '" + printable(host_part(*r.host)) +
                            "' is not a name of this admin listener (use its address, or add the name to admin.hosts)");
  if (!privileged(r.path)) return std::nullopt;
  if (r.has_origin) return refusal(403, "privileged admin endpoints do not answer requests from web pages (Origin)");
  if (!cfg.token.empty()) {
    constexpr std::string_view scheme = "Bearer ";
    const bool bearer = r.authorization && r.authorization->size() > scheme.size() &&
                        util::iequals(r.authorization->substr(0, scheme.size()), scheme);
    if (!bearer || !same_token(r.authorization->substr(scheme.size()), cfg.token)) {
      auto out = refusal(401, bearer ? "wrong admin token" : "this endpoint needs Authorization: Bearer <admin.token>");
      out.www_authenticate = "Bearer realm=\"floodgate admin\"";
      return out;
    }
    return std::nullopt;
  }
  if (r.method == "POST" && !r.has_admin_header)
    return refusal(403, "POST needs the header X-Floodgate-Admin (any value; a web page cannot send it) "
                        "or admin.token");
  return std::nullopt;
}

}  // namespace fg::admin
