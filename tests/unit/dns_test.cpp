// Upstream servers given by name: which names a configuration has, how answers become
// servers (one per address, the entry's port and weight, the caps), and that a name
// server that does not answer fails within the resolver's bounds.
#include <catch2/catch.hpp>

#include <chrono>

#include "config/caps.hpp"
#include "config/loader.hpp"
#include "upstream/dns.hpp"

namespace {

namespace up = fg::upstream;

std::vector<fg::config::upstream_config> upstreams(const std::string& servers) {
  auto r = fg::config::load_string("upstreams:\n  api:\n    servers:\n" + servers +
                                       "routes:\n  - name: all\n    match: {path_prefix: /}\n    upstream: api\n",
                                   "test.yaml");
  for (const auto& e : r.errors) FAIL(e.str());
  return r.cfg->upstreams;
}

up::ip_address ip(const char* s) { return boost::asio::ip::make_address(s); }

}  // namespace

TEST_CASE("dns: the names among the servers, each once, addresses left out", "[dns]") {
  auto ups = upstreams(
      "      - {address: \"api.internal:9000\"}\n      - {address: \"127.0.0.1:9001\"}\n"
      "      - {address: \"api.internal:9002\"}\n      - {address: \"[::1]:9003\"}\n      - {address: \"b.internal:1\"}\n");
  CHECK(up::server_names(ups) == std::vector<std::string>{"api.internal", "b.internal"});
}

TEST_CASE("dns: a name becomes a server per address with its entry's port and weight", "[dns]") {
  auto ups = upstreams("      - {address: \"api.internal:9000\", weight: 3}\n      - {address: \"127.0.0.1:9001\"}\n"
                       "      - {address: \"gone.internal:9002\"}\n");
  up::dns_answers answers{{"api.internal", {ip("10.0.0.1"), ip("10.0.0.2"), ip("fd00::1")}}};
  auto out = up::expand(ups, answers);
  REQUIRE(out.size() == 1);
  const auto& s = out[0].servers;
  REQUIRE(s.size() == 4);  // gone.internal has no answer: no server
  CHECK(s[0].address.str() == "10.0.0.1:9000");
  CHECK(s[1].address.str() == "10.0.0.2:9000");
  CHECK(s[2].address.str() == "[fd00::1]:9000");
  for (int i = 0; i < 3; ++i) {
    CHECK(s[i].weight == 3);
    CHECK(s[i].name == "api.internal:9000");
  }
  CHECK(s[3].address.str() == "127.0.0.1:9001");
  CHECK(s[3].name.empty());
  CHECK(out[0].name == ups[0].name);
  CHECK(out[0].retries == ups[0].retries);
}

TEST_CASE("dns: an address given twice is one server, and an upstream stays within its cap", "[dns]") {
  auto ups = upstreams("      - {address: \"127.0.0.1:9000\"}\n      - {address: \"a.internal:9000\"}\n"
                       "      - {address: \"b.internal:9000\"}\n");
  std::vector<up::ip_address> many;
  for (unsigned i = 0; i < 300; ++i) many.push_back(boost::asio::ip::address_v4(0x0a000000u + i));
  up::dns_answers answers{{"a.internal", {ip("127.0.0.1")}}, {"b.internal", many}};
  auto out = up::expand(ups, answers);
  REQUIRE(out[0].servers.size() == fg::config::caps::servers);
  CHECK(out[0].servers[0].address.str() == "127.0.0.1:9000");
  CHECK(out[0].servers[0].name.empty());  // the address listed first, not a.internal's copy of it
  CHECK(out[0].servers[1].address.str() == "10.0.0.0:9000");
}

TEST_CASE("dns: an address is its own answer, and a name server that does not answer fails in time", "[dns]") {
  fg::config::resolver_config rc;
  auto literal = up::resolve_names(rc, std::vector<std::string>{"127.0.0.1"});
  REQUIRE(literal.size() == 1);
  CHECK(literal[0].error.empty());
  CHECK(literal[0].addresses == std::vector<up::ip_address>{ip("127.0.0.1")});

  // Port 9 of loopback (discard): nothing answers; each try waits its timeout or is refused.
  rc.servers = {{"127.0.0.1", 9}};
  rc.timeout = fg::config::duration{200};
  rc.tries = 2;
  const auto t0 = std::chrono::steady_clock::now();
  auto got = up::resolve_names(rc, std::vector<std::string>{"nothing.invalid.example", "other.invalid.example"});
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE(got.size() == 2);
  CHECK_FALSE(got[0].error.empty());
  CHECK_FALSE(got[1].error.empty());
  CHECK(got[0].addresses.empty());
  // Bounded (timeout x tries, and a second), not hung: a wide margin for a stalled machine.
  CHECK(took < std::chrono::seconds(10));

  std::atomic<bool> stop{true};
  auto stopped = up::resolve_names(rc, std::vector<std::string>{"nothing.invalid.example"}, &stop);
  CHECK_FALSE(stopped[0].error.empty());
}
