#include "net/client_ip.hpp"

#include "util/text.hpp"

#include <boost/asio/ip/network_v6.hpp>

#include <algorithm>

namespace fg::net {
using util::iequals;
using util::trim;

namespace {

// Splits on commas outside quoted strings (with `quotes`; X-Forwarded-For has no
// quoted-string syntax, and honouring quotes there would let a client's unbalanced
// '"' swallow the entry its proxy appended).
template <class F>
void split_list(std::string_view v, F&& each, bool quotes = true) {
  std::size_t start = 0;
  bool quoted = false;
  for (std::size_t i = 0; i <= v.size(); ++i) {
    if (quotes && i < v.size() && v[i] == '"') quoted = !quoted;
    if (i < v.size() && v[i] == '\\' && quoted) {
      ++i;
      continue;
    }
    if (i == v.size() || (v[i] == ',' && !quoted)) {
      each(trim(v.substr(start, i - start)));
      start = i + 1;
    }
  }
}

}  // namespace

void forwarded_for_values(std::string_view value, std::vector<std::string_view>& out) {
  split_list(value, [&](std::string_view element) {
    std::string_view for_value;
    bool found = false;
    // pairs separated by ';' (outside quotes)
    std::size_t start = 0;
    bool quoted = false;
    for (std::size_t i = 0; i <= element.size(); ++i) {
      if (i < element.size() && element[i] == '"') quoted = !quoted;
      if (i == element.size() || (element[i] == ';' && !quoted)) {
        auto pair = trim(element.substr(start, i - start));
        auto eq = pair.find('=');
        if (eq != std::string_view::npos && iequals(trim(pair.substr(0, eq)), "for") && !found) {
          for_value = trim(pair.substr(eq + 1));
          found = true;
        }
        start = i + 1;
      }
    }
    // An element without for= still is a hop: keep its place so the walk stops there.
    out.push_back(found ? for_value : std::string_view());
  });
}

client_ip_resolver::client_ip_resolver(cidr_set trusted, std::vector<std::string> headers, unsigned ipv6_prefix)
    : trusted_(std::move(trusted)), headers_(std::move(headers)), ipv6_prefix_(ipv6_prefix) {
  for (const auto& h : headers_) {
    if (iequals(h, "X-Forwarded-For")) kinds_.push_back(kind::xff);
    else if (iequals(h, "Forwarded")) kinds_.push_back(kind::forwarded);
    else kinds_.push_back(kind::single);
  }
}

std::optional<address> client_ip_resolver::from_list(std::span<const header_field> fields, std::string_view name,
                                                     kind k) const {
  if (k == kind::single) {
    // One value expected; the last occurrence is the one our proxy set.
    std::optional<address> found;
    for (const auto& f : fields)
      if (iequals(f.name, name)) found = parse_forwarded_address(f.value);
    return found;
  }
  std::vector<std::string_view> hops;
  for (const auto& f : fields) {
    if (!iequals(f.name, name)) continue;
    if (k == kind::xff) split_list(f.value, [&](std::string_view v) { hops.push_back(v); }, false);
    else forwarded_for_values(f.value, hops);
  }
  // Right to left: skip our own proxies; the first untrusted hop is the client. A hop
  // that is not an address ("unknown", obfuscated) ends the walk: what lies to its left
  // was written by a party no trusted proxy vouched for.
  std::optional<address> leftmost_trusted;
  for (auto it = hops.rbegin(); it != hops.rend(); ++it) {
    if (k == kind::xff && trim(*it).empty()) continue;  // "a, , b" or a trailing comma
    auto a = parse_forwarded_address(*it);
    if (!a) return std::nullopt;
    if (!trusted_.contains(*a)) return a;
    leftmost_trusted = a;
  }
  return leftmost_trusted;
}

client_identity client_ip_resolver::resolve(const address& peer, std::span<const header_field> fields) const {
  auto p = normalize(peer);
  if (trusted_.contains(p)) {
    for (std::size_t i = 0; i < headers_.size(); ++i) {
      if (auto a = from_list(fields, headers_[i], kinds_[i])) return {*a, key_of(*a), true};
    }
  }
  return {p, key_of(p), false};
}

std::string client_ip_resolver::key_of(const address& a) const {
  if (a.is_v6() && ipv6_prefix_ < 128) {
    boost::asio::ip::network_v6 net(a.to_v6(), ipv6_prefix_);
    return net.canonical().to_string();
  }
  return a.to_string();
}

}  // namespace fg::net
