#include <catch2/catch.hpp>
#include <hiredis/hiredis.h>

#include <memory>
#include <set>
#include <string>

#include "config/config.hpp"
#include "redis/cluster_map.hpp"
#include "redis/reply.hpp"
#include "redis/slots.hpp"

// Redis Cluster's pure parts: the slot of a key as CLUSTER KEYSLOT computes it, the slot
// map read from CLUSTER SLOTS answers (RESP bytes parsed by hiredis' own reader, as the
// connection gets them), and MOVED / ASK redirections.
namespace {

using fg::config::endpoint;
using fg::redis::cluster_error;
using fg::redis::cluster_map;
using fg::redis::redirect;

// One reply from RESP bytes, through hiredis' reader (the tree the connection sees).
fg::redis::reply resp(const std::string& bytes) {
  std::unique_ptr<redisReader, decltype(&redisReaderFree)> reader(redisReaderCreate(), &redisReaderFree);
  REQUIRE(redisReaderFeed(reader.get(), bytes.data(), bytes.size()) == REDIS_OK);
  void* r = nullptr;
  REQUIRE(redisReaderGetReply(reader.get(), &r) == REDIS_OK);
  REQUIRE(r != nullptr);
  auto out = fg::redis::reply::from(static_cast<redisReply*>(r));
  freeReplyObject(r);
  return out;
}

std::string bulk(const std::string& s) { return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n"; }
std::string num(long long n) { return ":" + std::to_string(n) + "\r\n"; }
// A node as Redis 7.0 writes it: host, port, id, and the (here empty) metadata array.
std::string node(const std::string& host, int port, const std::string& id) {
  return "*4\r\n" + bulk(host) + num(port) + bulk(id) + "*0\r\n";
}
std::string range(int first, int last, const std::string& nodes, int n_nodes) {
  return "*" + std::to_string(2 + n_nodes) + "\r\n" + num(first) + num(last) + nodes;
}

const endpoint asked{"10.0.0.9", 7000};

// The answer of a 3-master cluster made by redis-cli --cluster create, one replica each.
std::string three_masters() {
  return "*3\r\n" +
         range(0, 5460, node("127.0.0.1", 7000, "a0") + node("127.0.0.1", 7004, "b4"), 2) +
         range(10923, 16383, node("127.0.0.1", 7002, "a2") + node("127.0.0.1", 7003, "b3"), 2) +
         range(5461, 10922, node("127.0.0.1", 7001, "a1") + node("127.0.0.1", 7005, "b5"), 2);
}

}  // namespace

TEST_CASE("crc16: CRC-16/XMODEM, the check value and small inputs", "[redis]") {
  CHECK(fg::redis::crc16("123456789") == 0x31C3);
  CHECK(fg::redis::crc16("") == 0);
  CHECK(fg::redis::crc16(std::string(1, '\0')) == 0);
  CHECK(fg::redis::crc16("A") == 0x58E5);
  // Binary-safe: bytes above 0x7f and NULs count.
  CHECK(fg::redis::crc16(std::string("\xff\x00", 2)) != fg::redis::crc16("\xff"));
}

TEST_CASE("key_slot: what CLUSTER KEYSLOT answers (Redis 7.0.15)", "[redis]") {
  using fg::redis::key_slot;
  CHECK(key_slot("123456789") == 12739);
  CHECK(key_slot("foo") == 12182);
  CHECK(key_slot("bar") == 5061);
  CHECK(key_slot("hello world") == 15332);
  CHECK(key_slot("") == 0);
  CHECK(key_slot("{") == 4092);
  CHECK(key_slot("}") == 12090);
  CHECK(key_slot("{}") == 15257);
  CHECK(key_slot("a{b") == 13340);
  // floodgate's key shape: the tag is route:limit:identity, the prefix is outside it.
  CHECK(key_slot("floodgate:{route:limit:1.2.3.4}") == 2328);
  CHECK(key_slot("floodgate:{route:limit:1.2.3.4}") == key_slot("route:limit:1.2.3.4"));
}

TEST_CASE("key_slot: hash tags as the cluster spec defines them", "[redis]") {
  using fg::redis::hash_tag;
  using fg::redis::key_slot;
  CHECK(key_slot("{user1000}.following") == 3443);
  CHECK(key_slot("{user1000}.followers") == 3443);
  CHECK(key_slot("user1000") == 3443);
  // An empty tag: the whole key.
  CHECK(hash_tag("foo{}{bar}") == "foo{}{bar}");
  CHECK(key_slot("foo{}{bar}") == 8363);
  // From the first '{' to the first '}' after it.
  CHECK(hash_tag("foo{{bar}}zap") == "{bar");
  CHECK(key_slot("foo{{bar}}zap") == 4015);
  CHECK(key_slot("foo{{bar}}zap") == key_slot("{bar"));
  CHECK(hash_tag("foo{bar}{zap}") == "bar");
  CHECK(key_slot("foo{bar}{zap}") == 5061);
  // No '}' after the '{': the whole key.
  CHECK(hash_tag("}foo{bar") == "}foo{bar");
  CHECK(hash_tag("a}b{c}") == "c");
}

TEST_CASE("cluster_map: three masters with a replica each, every slot looked up", "[redis]") {
  auto map = cluster_map::parse(resp(three_masters()), asked);
  REQUIRE(map.has_value());
  CHECK(map->complete());
  CHECK(map->covered() == 16384);
  REQUIRE(map->ranges().size() == 3);
  // Sorted by first slot, whatever order the server sent.
  CHECK(map->ranges()[1].first == 5461);
  CHECK(map->ranges()[1].last == 10922);
  CHECK(map->ranges()[1].master.address == endpoint{"127.0.0.1", 7001});
  REQUIRE(map->ranges()[1].replicas.size() == 1);
  CHECK(map->ranges()[1].replicas[0].address == endpoint{"127.0.0.1", 7005});
  CHECK(map->ranges()[1].replicas[0].id == "b5");
  REQUIRE(map->masters().size() == 3);
  CHECK(map->masters()[0].id == "a0");
  CHECK(map->masters()[1].id == "a1");
  CHECK(map->masters()[2].id == "a2");
  CHECK(map->master_for(0)->address.port == 7000);
  CHECK(map->master_for(5460)->address.port == 7000);
  CHECK(map->master_for(5461)->address.port == 7001);
  CHECK(map->master_for(10923)->address.port == 7002);
  CHECK(map->master_for(16383)->address.port == 7002);
  CHECK(map->master_for(16384) == nullptr);
  CHECK(map->master_for_key("foo")->address.port == 7002);  // slot 12182
  CHECK(map->master_for_key("{user1000}.following")->address.port == 7000);  // slot 3443
}

TEST_CASE("cluster_map: one master over several ranges is one master, gaps have none", "[redis]") {
  // After a reshard: 7000 holds 0-99 and 200-299, 100-199 went to 7001, the rest unassigned.
  auto text = "*3\r\n" + range(200, 299, node("127.0.0.1", 7000, "a0"), 1) +
              range(0, 99, node("127.0.0.1", 7000, "a0"), 1) + range(100, 199, node("127.0.0.1", 7001, "a1"), 1);
  auto map = cluster_map::parse(resp(text), asked);
  REQUIRE(map.has_value());
  CHECK(map->masters().size() == 2);
  CHECK(map->covered() == 300);
  CHECK_FALSE(map->complete());
  CHECK(map->master_for(150)->id == "a1");
  CHECK(map->master_for(250)->id == "a0");
  CHECK(map->master_for(300) == nullptr);
  CHECK(map->ranges()[2].replicas.empty());
  // A single slot.
  auto one = cluster_map::parse(resp("*1\r\n" + range(42, 42, node("h", 1, "x"), 1)), asked);
  REQUIRE(one.has_value());
  CHECK(one->covered() == 1);
  CHECK(one->master_for(42) != nullptr);
  CHECK(one->master_for(41) == nullptr);
  // No slots assigned at all (a fresh node): an empty map, not an error.
  auto empty = cluster_map::parse(resp("*0\r\n"), asked);
  REQUIRE(empty.has_value());
  CHECK(empty->masters().empty());
  CHECK(empty->master_for(0) == nullptr);
}

TEST_CASE("cluster_map: a node that does not know its address is the one asked", "[redis]") {
  // An empty host (a node alone before meeting others), "?" and nil (Redis 7's unknown
  // endpoint); old servers' nodes of two elements, without an id.
  auto text = "*3\r\n" + range(0, 9, "*2\r\n" + bulk("") + num(7001), 1) +
              range(10, 19, "*3\r\n" + bulk("?") + num(7002) + bulk("n2"), 1) +
              range(20, 29, "*3\r\n$-1\r\n" + num(7003) + bulk("n3") + node("::1", 7004, "r4"), 2);
  auto map = cluster_map::parse(resp(text), asked);
  REQUIRE(map.has_value());
  CHECK(map->master_for(0)->address == endpoint{"10.0.0.9", 7001});
  CHECK(map->master_for(0)->id.empty());
  CHECK(map->master_for(15)->address == endpoint{"10.0.0.9", 7002});
  CHECK(map->master_for(25)->address == endpoint{"10.0.0.9", 7003});
  CHECK(map->ranges()[2].replicas[0].address == endpoint{"::1", 7004});
  CHECK(map->ranges()[2].replicas[0].address.str() == "[::1]:7004");
}

TEST_CASE("cluster_map: without a preferred endpoint, the metadata's ip", "[redis]") {
  // cluster-preferred-endpoint-type unknown-endpoint (Redis 7.0.15): "" and the IP beside it.
  auto unknown = "*4\r\n" + bulk("") + num(7001) + bulk("a1") + "*2\r\n" + bulk("ip") + bulk("::1");
  auto no_name = "*4\r\n" + bulk("?") + num(7002) + bulk("a2") + "*4\r\n" + bulk("ip") + bulk("10.1.1.2") +
                 bulk("hostname") + bulk("");
  auto text = "*2\r\n" + range(0, 99, unknown, 1) + range(100, 199, no_name, 1);
  auto map = cluster_map::parse(resp(text), asked);
  REQUIRE(map.has_value());
  CHECK(map->master_for(0)->address == endpoint{"::1", 7001});
  CHECK(map->master_for(100)->address == endpoint{"10.1.1.2", 7002});
}

TEST_CASE("cluster_map: Redis 7 metadata and a hostname are accepted, the IP used", "[redis]") {
  auto meta = "*5\r\n" + bulk("127.0.0.1") + num(7000) + bulk("a0") + "*2\r\n" + bulk("hostname") + bulk("n0") +
              bulk("extra");
  auto map = cluster_map::parse(resp("*1\r\n" + range(0, 16383, meta, 1)), asked);
  REQUIRE(map.has_value());
  CHECK(map->complete());
  CHECK(map->masters()[0].address == endpoint{"127.0.0.1", 7000});
}

TEST_CASE("cluster_map: malformed answers are errors that say what was wrong", "[redis]") {
  auto fails = [](const std::string& text) {
    auto map = cluster_map::parse(resp(text), asked);
    REQUIRE_FALSE(map.has_value());
    return map.error();
  };
  CHECK(fails("-ERR This instance has cluster support disabled\r\n").find("cluster support disabled") !=
        std::string::npos);
  CHECK(fails("+OK\r\n") == "CLUSTER SLOTS did not answer an array");
  CHECK(fails("*1\r\n" + num(5)).find("a range") == 0);
  CHECK(fails("*1\r\n*2\r\n" + num(0) + num(5)).find("a range") == 0);  // no master
  CHECK(fails("*1\r\n" + range(5, 4, node("h", 1, "x"), 1)).find("slots") != std::string::npos);
  CHECK(fails("*1\r\n" + range(0, 16384, node("h", 1, "x"), 1)).find("slots") != std::string::npos);
  CHECK(fails("*1\r\n" + range(-1, 3, node("h", 1, "x"), 1)).find("slots") != std::string::npos);
  CHECK(fails("*1\r\n" + range(0, 3, node("h", 0, "x"), 1)).find("port") != std::string::npos);
  CHECK(fails("*1\r\n" + range(0, 3, node("h", 65536, "x"), 1)).find("port") != std::string::npos);
  CHECK(fails("*1\r\n" + range(0, 3, "*2\r\n" + bulk("h") + bulk("7000"), 1)).find("port") != std::string::npos);
  CHECK(fails("*1\r\n" + range(0, 3, "*2\r\n" + num(1) + num(7000), 1)).find("host") != std::string::npos);
  CHECK(fails("*1\r\n" + range(0, 3, bulk("h:1"), 1)).find("a node") == 0);
  CHECK(fails("*2\r\n" + range(0, 10, node("h", 1, "x"), 1) + range(10, 20, node("h", 2, "y"), 1)) ==
        "ranges overlap at slot 10");
  CHECK_FALSE(cluster_map::parse(static_cast<const redisReply*>(nullptr), asked).has_value());
}

TEST_CASE("cluster_map: parsed from hiredis' own reply tree", "[redis]") {
  std::unique_ptr<redisReader, decltype(&redisReaderFree)> reader(redisReaderCreate(), &redisReaderFree);
  auto bytes = three_masters();
  REQUIRE(redisReaderFeed(reader.get(), bytes.data(), bytes.size()) == REDIS_OK);
  void* r = nullptr;
  REQUIRE(redisReaderGetReply(reader.get(), &r) == REDIS_OK);
  auto map = cluster_map::parse(static_cast<const redisReply*>(r), asked);
  freeReplyObject(r);
  REQUIRE(map.has_value());
  CHECK(map->masters().size() == 3);
}

TEST_CASE("parse_redirect: MOVED and ASK, IPv4, IPv6 bare and bracketed, host-less", "[redis]") {
  using fg::redis::parse_redirect;
  using kind = redirect::kind;
  CHECK(parse_redirect("MOVED 3999 127.0.0.1:6381", asked) == redirect{kind::moved, 3999, {"127.0.0.1", 6381}});
  CHECK(parse_redirect("ASK 3999 127.0.0.1:6381", asked) == redirect{kind::ask, 3999, {"127.0.0.1", 6381}});
  CHECK(parse_redirect("MOVED 0 redis-0.example:7000", asked) == redirect{kind::moved, 0, {"redis-0.example", 7000}});
  CHECK(parse_redirect("MOVED 16383 [::1]:7000", asked) == redirect{kind::moved, 16383, {"::1", 7000}});
  // Redis itself writes an IPv6 address without brackets: the port is after the last colon.
  CHECK(parse_redirect("ASK 12 ::1:7000", asked) == redirect{kind::ask, 12, {"::1", 7000}});
  CHECK(parse_redirect("MOVED 12 fe80::1:2:7001", asked) == redirect{kind::moved, 12, {"fe80::1:2", 7001}});
  // Host-less (Redis 7's unknown endpoint): the host asked, the port given.
  CHECK(parse_redirect("MOVED 3999 :7002", asked) == redirect{kind::moved, 3999, {"10.0.0.9", 7002}});
  CHECK(parse_redirect("ASK 3999 []:7002", asked) == redirect{kind::ask, 3999, {"10.0.0.9", 7002}});
  // Redis 7.0.15's own texts: bound to ::1; unknown-endpoint; hostname preferred, not known.
  CHECK(parse_redirect("MOVED 12182 ::1:56671", asked) == redirect{kind::moved, 12182, {"::1", 56671}});
  CHECK(parse_redirect("MOVED 12182 :56671", asked) == redirect{kind::moved, 12182, {"10.0.0.9", 56671}});
  CHECK(parse_redirect("MOVED 12182 ?:56671", asked) == redirect{kind::moved, 12182, {"10.0.0.9", 56671}});
}

TEST_CASE("parse_redirect: anything else is no redirection", "[redis]") {
  using fg::redis::parse_redirect;
  for (const char* text : {"", "MOVED", "MOVED ", "MOVED 3999", "MOVED 3999 ", "MOVED 3999 127.0.0.1",
                           "MOVED 3999 127.0.0.1:", "MOVED 3999 127.0.0.1:0", "MOVED 3999 127.0.0.1:65536",
                           "MOVED 3999 127.0.0.1:70x", "MOVED 16384 h:1", "MOVED -1 h:1", "MOVED x h:1",
                           "MOVED  3999 h:1", "MOVEDX 1 h:1", "ASKING", "ASK 1 [::1:7000", "ERR unknown command",
                           "NOSCRIPT No matching script", "moved 1 h:1"})
    CHECK_FALSE(parse_redirect(text, asked));
}

TEST_CASE("classify_error: the cluster errors a command can meet", "[redis]") {
  using fg::redis::classify_error;
  CHECK(classify_error("MOVED 3999 127.0.0.1:6381") == cluster_error::moved);
  CHECK(classify_error("ASK 3999 127.0.0.1:6381") == cluster_error::ask);
  CHECK(classify_error("TRYAGAIN Multiple keys request during rehashing of slot") == cluster_error::try_again);
  CHECK(classify_error("CLUSTERDOWN Hash slot not served") == cluster_error::cluster_down);
  CHECK(classify_error("CLUSTERDOWN The cluster is down") == cluster_error::cluster_down);
  CHECK(classify_error("CROSSSLOT Keys in request don't hash to the same slot") == cluster_error::cross_slot);
  CHECK(classify_error("NOSCRIPT No matching script. Please use EVAL.") == cluster_error::none);
  CHECK(classify_error("ASKING") == cluster_error::none);
  CHECK(classify_error("") == cluster_error::none);
}

TEST_CASE("CLUSTER NODES: the usable nodes' addresses, bounded", "[redis][cluster]") {
  const fg::config::endpoint asked{"10.0.0.9", 7000};
  const std::string text =
      "07c3 127.0.0.1:30004@31004 master - 0 1 0 connected\n"                // a master with no slot
      "e7d1 127.0.0.1:30001@31001,host-a myself,master - 0 0 1 connected 0-5460\n"
      "67ed ::1:30002@31002 slave e7d1 0 1 2 connected\n"                    // IPv6, bare
      "292f 127.0.0.1:30003@31003 master,fail - 1 1 3 disconnected 5461-10922\n"
      "6ec2 :30005@31005 master,noaddr - 0 0 4 connected\n"
      "aaaa 127.0.0.1:30006@31006 handshake - 0 0 0 connected\n"
      "bbbb :30007@31007 myself,master - 0 0 5 connected\n"                  // unknown host: asked's
      "garbage\n\n";
  auto got = fg::redis::node_addresses(text, asked, 100);
  std::vector<std::string> s;
  for (const auto& e : got) s.push_back(e.str());
  CHECK(s == std::vector<std::string>{"127.0.0.1:30004", "127.0.0.1:30001", "[::1]:30002", "10.0.0.9:30007"});
  CHECK(fg::redis::node_addresses(text, asked, 2).size() == 2);
  // "failover" is not "fail"
  CHECK(fg::redis::node_addresses("x 1.2.3.4:1@2 master,failover - 0 0 0 connected", asked, 10).size() == 1);
}
