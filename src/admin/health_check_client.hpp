#pragma once
#include <boost/system/result.hpp>

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "net/http_url.hpp"

namespace fg::admin {

// Where `floodgate --health-check URL` asks: the one form it takes, http://host:port/path.
using health_url = net::http_url;

// Pure: http://host[:port][/path][?query]; anything else (https, user info, a fragment,
// no host) is an error with a one-line reason (net::parse_http_url).
boost::system::result<health_url, std::string> parse_health_url(std::string_view url);

// What one GET said: `healthy` on a 2xx status; `line` says why, in one line.
struct health_answer {
  bool healthy = false;
  std::string line;
};

// One GET of `url` over a new connection, all of it (resolve, connect, write, read)
// within `timeout`.
health_answer check_health(const health_url& url, std::chrono::milliseconds timeout);

// Another request to the admin listener: a POST (empty body) and headers of its own.
struct admin_request {
  bool post = false;
  std::vector<std::pair<std::string, std::string>> headers;
};
health_answer ask_admin(const health_url& url, std::chrono::milliseconds timeout, const admin_request& what);

// `floodgate --reload --config FILE` (a unit's ExecReload): POST /reload to the running
// gateway's admin listener (admin.listen from FILE, admin.token as the bearer), which
// answers when the reload is done: exit 0 if it was applied, 1 if it was refused (the
// errors on stderr) or the gateway could not be asked.
int run_reload(const config::config& cfg, std::chrono::milliseconds timeout = std::chrono::seconds(60));

// `floodgate --health-check URL`: the image's HEALTHCHECK, with no curl in the image.
// Exit code 0 on a 2xx answer, 1 otherwise, with the reason on stderr.
int run_health_check(std::string_view url, std::chrono::milliseconds timeout = std::chrono::seconds(3));

}  // namespace fg::admin
