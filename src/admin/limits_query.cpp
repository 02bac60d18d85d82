#include "admin/limits_query.hpp"

#include <boost/json/serialize.hpp>
#include <boost/url/grammar/string_token.hpp>
#include <boost/url/params_encoded_view.hpp>

#include <algorithm>
#include <array>
#include <charconv>

#include "net/client_ip.hpp"
#include "util/text.hpp"

namespace fg::admin {

namespace urls = boost::urls;

namespace {

reply bad(unsigned status, const std::string& message) {
  return {status, boost::json::serialize(boost::json::object{{"error", message}}), "application/json", {}};
}

// Percent-decoded, '+' kept (a header's or an address' text has no form encoding).
std::string decoded(urls::pct_string_view v) {
  std::string out;
  v.decode({}, urls::string_token::assign_to(out));
  return out;
}

// Percent-encodes every byte of `v` for which `keep` is false.
template <class Keep>
void append_escaped(std::string& out, std::string_view v, Keep keep) {
  static constexpr char hex[] = "0123456789ABCDEF";
  for (unsigned char c : v) {
    if (keep(c)) {
      out += static_cast<char>(c);
    } else {
      const char esc[3] = {'%', hex[c >> 4], hex[c & 0xf]};
      out.append(esc, 3);
    }
  }
}

bool unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

// What a Cookie header cannot carry as it is: the delimiters, quotes, controls.
bool cookie_safe(unsigned char c) { return c > 0x20 && c < 0x7f && c != ';' && c != ',' && c != '"' && c != '\\'; }

}  // namespace

std::optional<reply> parse_limits_query(urls::url_view url, limits_query& out) {
  if (url.encoded_query().size() > max_limits_query_bytes)
    return bad(414, "query too long (at most " + std::to_string(max_limits_query_bytes) + " bytes)");
  auto params = url.encoded_params();
  if (params.size() > max_limits_params)
    return bad(400, "too many parameters (at most " + std::to_string(max_limits_params) + ")");
  std::vector<std::string> seen;
  bool has_route = false;
  for (auto p : params) {
    auto name = decoded(p.key);
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) return bad(400, "parameter '" + name + "' given twice");
    seen.push_back(name);
    std::string_view n = name;
    // As a request carries them: raw for the query and cookies (the gateway decodes those).
    std::string raw(p.value.data(), p.value.size());
    if (n == "route") {
      out.route = decoded(p.value);
      has_route = true;
    } else if (n == "ip") {
      out.ip = decoded(p.value);
    } else if (n == "limit") {
      out.limit = decoded(p.value);
    } else if (n == "amount") {
      const auto v = decoded(p.value);
      std::uint64_t a = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), a);
      if (v.empty() || ec != std::errc{} || end != v.data() + v.size() || a == 0 || a > max_grant)
        return bad(400, "parameter 'amount': a whole number from 1 to " + std::to_string(max_grant) + " is expected");
      out.amount = a;
    } else if (n == "client_cert") {
      out.client_cert = decoded(p.value);
    } else if (n.starts_with("header.") && n.size() > 7) {
      out.headers.emplace_back(name.substr(7), decoded(p.value));
    } else if (n.starts_with("query.") && n.size() > 6) {
      out.query.emplace_back(name.substr(6), std::move(raw));
    } else if (n.starts_with("cookie.") && n.size() > 7) {
      out.cookies.emplace_back(name.substr(7), std::move(raw));
    } else {
      return bad(400, "unknown parameter '" + name + "' (route, ip, client_cert, header.NAME, query.NAME, cookie.NAME, limit, amount)");
    }
  }
  if (!has_route || out.route.empty()) return bad(400, "missing parameter 'route'");
  return std::nullopt;
}

synthetic_request::synthetic_request(const limits_query& q, std::string client) : q_(q), client_(std::move(client)) {
  for (const auto& [name, raw] : q.query) {
    if (!query_.empty()) query_ += '&';
    append_escaped(query_, name, unreserved);
    query_ += '=';
    query_ += raw;
  }
  // A Cookie header given whole comes first; the cookie.NAME ones after it.
  for (const auto& [name, value] : q.headers)
    if (util::iequals(name, "Cookie")) {
      cookie_ = value;
      break;
    }
  for (const auto& [name, raw] : q.cookies) {
    if (!cookie_.empty()) cookie_ += "; ";
    cookie_ += name;
    cookie_ += '=';
    // Escaped, the gateway decodes it back (a cookie value with '%' is percent-decoded).
    append_escaped(cookie_, raw, cookie_safe);
  }
  parts_.client = client_;
  parts_.query = query_;
  parts_.client_cert = q.client_cert;
  // A body of unknown size: a body_bytes limit is asked about as for a request that
  // takes 1 up front (an admin query has no body, and a cost of 0 would skip the limit).
  parts_.chunked = true;
  parts_.header = &synthetic_request::header;
  parts_.header_ctx = this;
}

std::optional<std::string_view> synthetic_request::header(const void* self, std::string_view name) {
  const auto& s = *static_cast<const synthetic_request*>(self);
  if (util::iequals(name, "Cookie")) {
    if (s.cookie_.empty() && s.q_.cookies.empty()) return std::nullopt;
    return std::string_view(s.cookie_);
  }
  // Header names are case-insensitive; the first of a name is the one read.
  for (const auto& [n, v] : s.q_.headers)
    if (util::iequals(n, name)) return std::string_view(v);
  return std::nullopt;
}

std::optional<std::string> client_key(std::string_view ip, const config::config& cfg) {
  auto a = net::parse_forwarded_address(ip);
  if (!a) return std::nullopt;
  net::client_ip_resolver r({}, {}, static_cast<unsigned>(cfg.client_ip.ipv6_prefix));
  return r.key_of(net::normalize(*a));
}

bool source_missing(const config::limit_config& l, const config::key_source& k, const limit::request_parts& r) {
  // This one source alone, skipped when missing: build_key says whether it is.
  config::limit_config one = l;
  one.key = {k};
  one.missing_key = config::on_missing_key::skip;
  std::string key;
  return !limit::build_key(key, "", "", one, r);
}

}  // namespace fg::admin
