// Tests for admin/health_check: the URLs `floodgate --health-check` takes and refuses
// (pure), and the check against a closed port (fails at once, not after the timeout).
#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <string>

#include "admin/health_check_client.hpp"

namespace admin = fg::admin;

TEST_CASE("parse_health_url takes http://host:port/path", "[admin]") {
  struct row {
    const char* url;
    const char* host;
    const char* port;
    const char* target;
    const char* authority;
  };
  const row rows[] = {
      {"http://127.0.0.1:9901/readyz", "127.0.0.1", "9901", "/readyz", "127.0.0.1:9901"},
      {"http://localhost:9901/healthz", "localhost", "9901", "/healthz", "localhost:9901"},
      {"http://[::1]:9901/readyz", "::1", "9901", "/readyz", "[::1]:9901"},
      {"http://127.0.0.1:9901", "127.0.0.1", "9901", "/", "127.0.0.1:9901"},
      {"http://example.com/x", "example.com", "80", "/x", "example.com"},
      {"http://h:1/a/b?x=1&y=%20", "h", "1", "/a/b?x=1&y=%20", "h:1"},
      {"HTTP://H:2/", "H", "2", "/", "H:2"},
  };
  for (const auto& r : rows) {
    INFO(r.url);
    auto u = admin::parse_health_url(r.url);
    REQUIRE(u.has_value());
    CHECK(u->host == r.host);
    CHECK(u->port == r.port);
    CHECK(u->port_number == std::stoi(r.port));
    CHECK(u->target == r.target);
    CHECK(u->authority == r.authority);
  }
}

TEST_CASE("parse_health_url refuses what it does not check, saying why", "[admin]") {
  const std::pair<const char*, const char*> rows[] = {
      {"https://127.0.0.1:9901/readyz", "only http:// URLs are taken"},
      {"ftp://h:1/", "only http:// URLs are taken"},
      {"127.0.0.1:9901/readyz", "not a URL (want http://host:port/path)"},
      {"localhost:9901/readyz", "only http:// URLs are taken"},
      {"/readyz", "not a URL (want http://host:port/path)"},
      {"", "not a URL (want http://host:port/path)"},
      {"http://a b:1/", "not a URL (want http://host:port/path)"},
      {"http:///readyz", "the URL has no host"},
      {"http://u:p@h:1/", "a URL with user info is not taken"},
      {"http://h:1/#x", "a URL with a fragment is not taken"},
      {"http://h:0/", "the URL's port is not 1..65535"},
      {"http://h:/", "the URL's port is not 1..65535"},
      {"http://h:65536/", "the URL's port is not 1..65535"},
  };
  for (const auto& [url, why] : rows) {
    INFO(url);
    auto u = admin::parse_health_url(url);
    REQUIRE_FALSE(u.has_value());
    CHECK(u.error() == why);
  }
}

TEST_CASE("check_health on a closed port is unhealthy at once", "[admin]") {
  // A port that was free a moment ago: bound, then closed.
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor a(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
  const auto port = std::to_string(a.local_endpoint().port());
  a.close();
  auto u = admin::parse_health_url("http://127.0.0.1:" + port + "/readyz");
  REQUIRE(u.has_value());
  const auto start = std::chrono::steady_clock::now();
  auto answer = admin::check_health(*u, std::chrono::seconds(3));
  CHECK_FALSE(answer.healthy);
  CHECK(answer.line.find("cannot connect to 127.0.0.1:" + port) == 0);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
}
