// Tests for live limit inspection in the memory store: memory_store::peek answers what
// evaluate() would, for every algorithm, recording nothing and creating no key.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "limit/decision.hpp"
#include "store/memory_store.hpp"
#include "limit_configs.hpp"

namespace cfg = fg::config;
using fg::limit::check;
using fg::limit::decision;
using fg::store::memory_store;
using std::chrono::milliseconds;

using fg::test::rated;
using fg::test::windowed;

namespace {

// One limit of each algorithm, quota 4 (limit or burst).
std::vector<cfg::limit_config> every_algorithm() {
  return {windowed(cfg::algorithm::fixed_window, 4, 10'000, "fixed_window"),
          windowed(cfg::algorithm::sliding_log, 4, 10'000, "sliding_log"),
          windowed(cfg::algorithm::sliding_window, 4, 10'000, "sliding_window"),
          rated(cfg::algorithm::token_bucket, 4, 10'000, 4, "token_bucket"),
          rated(cfg::algorithm::gcra, 4, 10'000, 4, "gcra"),
          windowed(cfg::algorithm::concurrency, 4, 10'000, "concurrency")};
}

decision peek_one(const memory_store& st, const check& c, std::int64_t now) {
  std::vector<decision> out(1);
  st.peek(std::span<const check>(&c, 1), out, now);
  return out[0];
}

decision eval_one(memory_store& st, const check& c, std::int64_t now, std::uint64_t lease) {
  std::vector<decision> out(1);
  st.evaluate(std::span<const check>(&c, 1), out, now, lease);
  return out[0];
}

bool same(const decision& a, const decision& b) {
  return a.allowed == b.allowed && a.limit == b.limit && a.remaining == b.remaining && a.reset_ms == b.reset_ms &&
         a.retry_ms == b.retry_ms;
}

}  // namespace

TEST_CASE("memory_store::peek answers what the next evaluate does, for every algorithm, and records nothing",
          "[limit][inspect]") {
  for (const auto& l : every_algorithm()) {
    DYNAMIC_SECTION(l.name) {
      memory_store st;
      const check c{&l, "k:" + l.name, 1};
      std::int64_t now = 1'000'000;
      // From a fresh key to past the quota (denied), 3 ms apart; three peeks before each.
      for (int i = 0; i < 7; ++i, now += 3) {
        auto p = peek_one(st, c, now);
        CHECK(same(peek_one(st, c, now), p));
        CHECK(same(peek_one(st, c, now), p));
        auto e = eval_one(st, c, now, static_cast<std::uint64_t>(i + 1));
        INFO("request " << i << ": peek allowed " << p.allowed << " remaining " << p.remaining << ", evaluate "
                        << e.allowed << " " << e.remaining);
        CHECK(same(p, e));
        CHECK(e.allowed == (i < 4));
      }
      // Denied: a peek still says so, with the same retry, and the state did not move.
      auto p = peek_one(st, c, now);
      CHECK_FALSE(p.allowed);
      CHECK(p.retry_ms > 0);
      CHECK(same(p, eval_one(st, c, now, 99)));
    }
  }
}

TEST_CASE("memory_store::peek creates no key, whatever it is asked", "[limit][inspect]") {
  memory_store st(64 * 4);  // 4 keys per shard: a peek that inserted would also evict
  auto limits = every_algorithm();
  const check held{&limits[0], "k:held", 1};
  eval_one(st, held, 1000, 1);
  REQUIRE(st.size() == 1);
  for (const auto& l : limits) {
    for (int i = 0; i < 500; ++i) {
      const check c{&l, "k:unknown:" + std::to_string(i), 1};
      auto d = peek_one(st, c, 1000);
      // An unknown key is a fresh one: the whole quota, less this request's cost.
      CHECK(d.allowed);
      CHECK(d.remaining == 3);
    }
  }
  CHECK(st.size() == 1);
  CHECK(st.evictions() == 0);
  // And a held key's count did not move: the next evaluate is its second request.
  CHECK(eval_one(st, held, 1001, 2).remaining == 2);
}

TEST_CASE("memory_store::peek of several limits: each its own answer, as evaluate gives them", "[limit][inspect]") {
  memory_store st;
  auto tight = windowed(cfg::algorithm::fixed_window, 1, 10'000, "tight");
  auto loose = windowed(cfg::algorithm::sliding_log, 10, 10'000, "loose");
  auto shadow = windowed(cfg::algorithm::fixed_window, 1, 10'000, "shadow");
  shadow.shadow = true;
  std::vector<check> checks{{&tight, "k:t", 1}, {&loose, "k:l", 1}, {&shadow, "k:s", 1}};
  std::vector<decision> out(3), peeked(3);
  st.evaluate(checks, out, 1000, 1);  // all admitted: tight and shadow now full
  st.peek(checks, peeked, 1001);
  CHECK_FALSE(peeked[0].allowed);
  CHECK((peeked[1].allowed && peeked[1].remaining == 8));
  CHECK_FALSE(peeked[2].allowed);
  st.evaluate(checks, out, 1001, 2);
  for (int i = 0; i < 3; ++i) CHECK(same(peeked[static_cast<std::size_t>(i)], out[static_cast<std::size_t>(i)]));
  // tight denied the request: loose recorded nothing, and a peek still says 8.
  st.peek(checks, peeked, 1002);
  CHECK(peeked[1].remaining == 8);
}

TEST_CASE("memory_store::peek of a concurrency limit counts the leases in use", "[limit][inspect]") {
  memory_store st;
  auto cc = windowed(cfg::algorithm::concurrency, 2, 10'000, "cc");
  const check c{&cc, "k:cc", 1};
  CHECK(peek_one(st, c, 1000).remaining == 1);
  eval_one(st, c, 1000, 7);
  CHECK(peek_one(st, c, 1001).remaining == 0);
  eval_one(st, c, 1001, 8);
  CHECK_FALSE(peek_one(st, c, 1002).allowed);
  st.release("k:cc", 7);
  CHECK((peek_one(st, c, 1003).allowed && peek_one(st, c, 1003).remaining == 0));
  // A lease past its lifetime no longer counts, though the peek does not reclaim it.
  CHECK(peek_one(st, c, 1001 + 10'000).remaining == 1);
}
