#include "net/cidr.hpp"

#include "util/text.hpp"

#include <charconv>

namespace fg::net {
using util::iequals;
using util::trim;

namespace {

std::optional<address> parse_plain(std::string_view s) {
  // make_address wants a NUL-terminated string; addresses are short.
  if (s.empty() || s.size() > 64) return std::nullopt;
  // Zone ids ("fe80::1%eth0") are local to the sender: not an identity. Reject them
  // textually: make_address turns an unknown zone name into scope id 0 and accepts it.
  if (s.find('%') != std::string_view::npos) return std::nullopt;
  char buf[65];
  s.copy(buf, s.size());
  buf[s.size()] = '\0';
  boost::system::error_code ec;
  auto a = boost::asio::ip::make_address(buf, ec);
  if (ec) return std::nullopt;
  // Zone ids ("fe80::1%eth0") are local to the sender: not an identity.
  if (a.is_v6() && a.to_v6().scope_id() != 0) return std::nullopt;
  return normalize(a);
}

address mask(const address& a, unsigned prefix) {
  if (a.is_v4()) return boost::asio::ip::network_v4(a.to_v4(), prefix).network();
  return boost::asio::ip::network_v6(a.to_v6(), prefix).network();
}

}  // namespace

address normalize(const address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, a.to_v6());
  return a;
}

bool cidr::contains(const address& a) const {
  auto n = normalize(a);
  if (n.is_v4() != base.is_v4()) return false;
  return mask(n, prefix) == base;
}

std::optional<cidr> parse_cidr(std::string_view text) {
  text = trim(text);
  auto slash = text.find('/');
  auto a = parse_plain(text.substr(0, slash));
  if (!a) return std::nullopt;
  unsigned max = a->is_v4() ? 32 : 128;
  unsigned prefix = max;
  if (slash != std::string_view::npos) {
    auto p = text.substr(slash + 1);
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), prefix);
    if (p.empty() || ec != std::errc{} || end != p.data() + p.size() || prefix > max) return std::nullopt;
  }
  return cidr{mask(*a, prefix), prefix};
}

bool cidr_set::contains(const address& a) const {
  auto n = normalize(a);
  for (const auto& c : n.is_v4() ? v4_ : v6_)
    if (c.contains(n)) return true;
  return false;
}

std::optional<address> parse_forwarded_address(std::string_view text) {
  text = trim(text);
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = trim(text.substr(1, text.size() - 2));
  if (text.empty()) return std::nullopt;
  if (text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    auto rest = text.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return std::nullopt;
    auto a = parse_plain(text.substr(1, close - 1));
    if (!a || !(a->is_v6() || text.substr(1, close - 1).find(':') != std::string_view::npos)) return std::nullopt;
    return a;
  }
  auto colon = text.find(':');
  // One colon: IPv4 with a port. Several: a bare IPv6 address.
  if (colon != std::string_view::npos && text.find(':', colon + 1) == std::string_view::npos) {
    auto a = parse_plain(text.substr(0, colon));
    if (!a || !a->is_v4()) return std::nullopt;
    return a;
  }
  return parse_plain(text);
}

}  // namespace fg::net
