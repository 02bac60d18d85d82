#pragma once
// http://host[:port][/path][?query], the one URL form the gateway takes where it is the
// client of a side service (floodgate --health-check, a span collector). Pure.
#include <boost/system/result.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace fg::net {

struct http_url {
  std::string host;    // a name or an address, without the brackets of an IPv6 literal
  std::string port;    // "80" when the URL has none
  std::string target;  // path and query, "/" when the URL has none
  std::string authority;  // host[:port] as written, for the Host header
  bool path_given = false;  // the URL has a path (else target is "/")
  std::uint16_t port_number = 80;  // (port's)
};

// Anything but that form (https, user info, a fragment, no host, port 0) is an error
// with a one-line reason.
boost::system::result<http_url, std::string> parse_http_url(std::string_view text);

}  // namespace fg::net
