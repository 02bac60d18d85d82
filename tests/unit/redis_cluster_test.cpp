#include <catch2/catch.hpp>

#include <string>

#include "redis/slots.hpp"

// Redis Cluster's pure parts: the slot of a key as CLUSTER KEYSLOT computes it.

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
