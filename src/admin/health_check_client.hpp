#pragma once
#include <boost/system/result.hpp>

#include <chrono>
#include <string>
#include <string_view>

namespace fg::admin {

// Where `floodgate --health-check URL` asks: the one form it takes, http://host:port/path.
struct health_url {
  std::string host;    // a name or an address, without the brackets of an IPv6 literal
  std::string port;    // "80" when the URL has none
  std::string target;  // path and query, "/" when the URL has none
  std::string authority;  // host[:port] as written, for the Host header
};

// Pure: http://host[:port][/path][?query]; anything else (https, user info, a fragment,
// no host) is an error with a one-line reason.
boost::system::result<health_url, std::string> parse_health_url(std::string_view url);

// What one GET said: `healthy` on a 2xx status; `line` says why, in one line.
struct health_answer {
  bool healthy = false;
  std::string line;
};

// One GET of `url` over a new connection, all of it (resolve, connect, write, read)
// within `timeout`.
health_answer check_health(const health_url& url, std::chrono::milliseconds timeout);

// `floodgate --health-check URL`: the image's HEALTHCHECK, with no curl in the image.
// Exit code 0 on a 2xx answer, 1 otherwise, with the reason on stderr.
int run_health_check(std::string_view url, std::chrono::milliseconds timeout = std::chrono::seconds(3));

}  // namespace fg::admin
