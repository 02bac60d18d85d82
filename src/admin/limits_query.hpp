#pragma once
#include <boost/url/url_view.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "admin/routes.hpp"
#include "config/config.hpp"
#include "limit/keys.hpp"

namespace fg::admin {

// What a client of the admin port may put in one /limits query.
inline constexpr std::size_t max_limits_query_bytes = 2048;  // 414 above
inline constexpr std::size_t max_limits_params = 16;         // 400 above
// The most a grant gives at once: 2^53, what the store's numbers (Lua doubles) hold exactly.
inline constexpr std::uint64_t max_grant = std::uint64_t{1} << 53;

// One /limits question: a route, and the attributes of a request to it. Values as a
// request carries them: `query` and `cookies` raw (the gateway decodes them as it
// decodes a request's), `headers` and `ip` percent-decoded (a header is taken as it is).
struct limits_query {
  using pair = std::pair<std::string, std::string>;
  std::string route;
  std::optional<std::string> ip;
  std::string client_cert;  // the subject of a client certificate ("" = none)
  std::vector<pair> headers, query, cookies;  // (name, value), names decoded
  // POST /limits/reset and /limits/grant: only the limit of this name; the grant's amount.
  std::optional<std::string> limit;
  std::optional<std::uint64_t> amount;
};

// Reads ?route=R&ip=A&header.NAME=V&query.NAME=V&cookie.NAME=V&limit=L&amount=N into
// `out`; else the reply that says what is wrong (400: unknown, repeated or too many
// parameters, no route, an amount that is no whole number from 1 to max_grant; 414: too
// long).
std::optional<reply> parse_limits_query(boost::urls::url_view url, limits_query& out);

// A request with a query's attributes, as limit::build_key reads one: the gateway's own
// key building then gives the keys a real request with them would use.
class synthetic_request {
 public:
  // `client`: the client's identity key (net::client_ip_resolver::key_of), "" if none.
  synthetic_request(const limits_query& q, std::string client);
  synthetic_request(const synthetic_request&) = delete;
  synthetic_request& operator=(const synthetic_request&) = delete;
  const limit::request_parts& parts() const { return parts_; }

 private:
  static std::optional<std::string_view> header(const void* self, std::string_view name);

  const limits_query& q_;
  std::string client_, query_, cookie_;
  limit::request_parts parts_;
};

// The client identity key of `ip` as the gateway keys the peer (IPv4-mapped IPv6 as
// IPv4, IPv6 by client_ip.ipv6_prefix); nullopt when it is not an address.
std::optional<std::string> client_key(std::string_view ip, const config::config& cfg);

// Whether `l`'s key source `k` is missing from the request (as build_key finds it).
bool source_missing(const config::limit_config& l, const config::key_source& k, const limit::request_parts& r);

}  // namespace fg::admin
