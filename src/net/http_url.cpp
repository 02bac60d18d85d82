#include "net/http_url.hpp"

#include <boost/url/parse.hpp>

#include <charconv>

namespace fg::net {

namespace {
boost::system::result<http_url, std::string> fail(const char* why) { return {boost::system::in_place_error, why}; }
}  // namespace

boost::system::result<http_url, std::string> parse_http_url(std::string_view text) {
  auto parsed = boost::urls::parse_uri(text);
  if (!parsed) return fail("not a URL (want http://host:port/path)");
  const auto& u = *parsed;
  if (u.scheme_id() != boost::urls::scheme::http) return fail("only http:// URLs are taken");
  if (u.has_userinfo()) return fail("a URL with user info is not taken");
  if (u.has_fragment()) return fail("a URL with a fragment is not taken");
  if (u.encoded_host().empty()) return fail("the URL has no host");
  http_url out;
  switch (u.host_type()) {
    case boost::urls::host_type::ipv6: out.host = u.host_ipv6_address().to_string(); break;
    case boost::urls::host_type::ipv4: out.host = u.host_ipv4_address().to_string(); break;
    case boost::urls::host_type::name: out.host = u.host(); break;
    default: return fail("the URL's host is not a name or an address");
  }
  if (u.has_port()) {
    // (the digits read whole: Boost.URL's port_number() is 0 past 65535, as for port 0)
    unsigned n = 0;
    const auto p = u.port();
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), n);
    if (p.empty() || ec != std::errc() || end != p.data() + p.size() || n == 0 || n > 65535)
      return fail("the URL's port is not 1..65535");
    out.port = p;
    out.port_number = static_cast<std::uint16_t>(n);
  } else {
    out.port = "80";
  }
  out.path_given = !u.encoded_path().empty();
  out.target = out.path_given ? std::string(u.encoded_path()) : "/";
  if (u.has_query()) out.target += "?" + std::string(u.encoded_query());
  out.authority = u.encoded_host_and_port();
  return out;
}

}  // namespace fg::net
