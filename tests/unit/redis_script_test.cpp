#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "config/config.hpp"
#include "redis/resp.hpp"
#include "redis/script.hpp"
#include "redis/topology.hpp"

// What the connection sends, byte for byte: the script's SHA-1 (as Redis computes it),
// EVALSHA and EVAL in RESP, plain commands; and where it connects.

TEST_CASE("sha1_hex: the names Redis gives scripts", "[redis]") {
  // printf 'return 1' | sha1sum (what SCRIPT LOAD "return 1" answers)
  CHECK(fg::redis::sha1_hex("return 1") == "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
  CHECK(fg::redis::sha1_hex("") == "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  CHECK(fg::redis::sha1_hex("abc") == "a9993e364706816aba3e25717850c26c9cd0d89d");
  // Binary-safe: an embedded NUL is part of the script.
  CHECK(fg::redis::sha1_hex(std::string("a\0b", 3)) != fg::redis::sha1_hex("a"));
  fg::redis::script s("return 1");
  CHECK(s.sha() == "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
  CHECK(s.text() == "return 1");
}

TEST_CASE("resp: bulk strings, array heads, whole commands", "[redis]") {
  std::string out;
  fg::redis::append_bulk(out, "");
  fg::redis::append_bulk(out, "hello");
  CHECK(out == "$0\r\n\r\n$5\r\nhello\r\n");
  out.clear();
  fg::redis::append_array_head(out, 12);
  CHECK(out == "*12\r\n");
  CHECK(fg::redis::format_command({"SELECT", "3"}) == "*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n");
  CHECK(fg::redis::format_command({}) == "*0\r\n");
}

TEST_CASE("script: EVALSHA and EVAL carry the same arguments", "[redis]") {
  fg::redis::script s("return 1");
  std::string args;
  fg::redis::append_bulk(args, "1");
  fg::redis::append_bulk(args, "k");
  fg::redis::append_bulk(args, std::string(300, 'v'));
  const std::string tail = "$1\r\n1\r\n$1\r\nk\r\n$300\r\n" + std::string(300, 'v') + "\r\n";
  CHECK(s.evalsha(3, args) ==
        "*5\r\n$7\r\nEVALSHA\r\n$40\r\ne0e1f9fabfc9d4800c877a703b823ac0578ff8db\r\n" + tail);
  CHECK(s.eval(3, args) == "*5\r\n$4\r\nEVAL\r\n$8\r\nreturn 1\r\n" + tail);
}

TEST_CASE("topology: standalone connects to the first address (cluster mode too, for now)", "[redis]") {
  boost::asio::io_context ioc;
  fg::config::redis_config cfg;
  cfg.addresses = {{"10.0.0.1", 6380}, {"10.0.0.2", 6381}};
  auto t = fg::redis::make_topology(ioc.get_executor(), cfg);
  auto seeds = t->seeds();
  REQUIRE(seeds.size() == 1);
  CHECK(seeds[0].host == "10.0.0.1");
  CHECK(seeds[0].port == 6380);
  t->on_lost(seeds[0]);
  CHECK(t->seeds().size() == 1);  // nothing else to try
  // Cluster is not there yet: the first address, as before.
  cfg.mode = fg::config::redis_mode::cluster;
  CHECK(fg::redis::make_topology(ioc.get_executor(), cfg)->seeds()[0].port == 6380);
  CHECK_FALSE(t->verify_role());
  // Sentinel: no master until a sentinel names one; ROLE checked on every connect.
  cfg.mode = fg::config::redis_mode::sentinel;
  cfg.master_name = "mymaster";
  auto s = fg::redis::make_topology(ioc.get_executor(), cfg);
  CHECK(s->seeds().empty());
  CHECK(s->verify_role());
  s->stop();
  CHECK(fg::redis::standalone({}).seeds().empty());
}
