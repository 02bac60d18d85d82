#pragma once
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/network_v4.hpp>
#include <boost/asio/ip/network_v6.hpp>

#include <optional>
#include <string_view>
#include <vector>

namespace fg::net {

using address = boost::asio::ip::address;

// IPv4-mapped IPv6 (::ffff:a.b.c.d) becomes the IPv4 address; anything else is unchanged.
address normalize(const address& a);

// "10.0.0.0/8", "2001:db8::/32", or a bare address (a /32 or /128).
struct cidr {
  address base;  // masked
  unsigned prefix = 0;
  bool contains(const address& a) const;
};
std::optional<cidr> parse_cidr(std::string_view text);

class cidr_set {
 public:
  void add(const cidr& c) { (c.base.is_v4() ? v4_ : v6_).push_back(c); }
  bool contains(const address& a) const;
  bool empty() const { return v4_.empty() && v6_.empty(); }

 private:
  std::vector<cidr> v4_, v6_;
};

// Parses an address as found in forwarding headers: strips a port ("1.2.3.4:80",
// "[::1]:80"), brackets and surrounding spaces; normalizes IPv4-mapped IPv6.
std::optional<address> parse_forwarded_address(std::string_view text);

}  // namespace fg::net
