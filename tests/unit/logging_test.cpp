#include <catch2/catch.hpp>

#include "obs/logging.hpp"

using fg::obs::error_log_limiter;
using namespace std::chrono_literals;

TEST_CASE("error log limiter: one line per cause per interval, with the count of the rest", "[obs]") {
  error_log_limiter lim(5s);
  const auto t0 = error_log_limiter::clock::time_point{} + 1h;
  std::uint64_t n = 99;
  CHECK(lim.due("timeout", t0, n));
  CHECK(n == 0);
  for (int i = 0; i < 1000; ++i) CHECK_FALSE(lim.due("timeout", t0 + 1ms * i, n));  // a request each: no line
  // Another cause in the same seconds has its own line.
  CHECK(lim.due("connection refused", t0 + 2s, n));
  CHECK(n == 0);
  CHECK_FALSE(lim.due("timeout", t0 + 4999ms, n));
  CHECK(lim.due("timeout", t0 + 5s, n));
  CHECK(n == 1001);  // what was not logged since the last line
  CHECK_FALSE(lim.due("timeout", t0 + 6s, n));
  CHECK(lim.due("timeout", t0 + 11s, n));
  CHECK(n == 1);
  CHECK_FALSE(lim.due("connection refused", t0 + 6s, n));
  CHECK(lim.due("connection refused", t0 + 7s, n));
  CHECK(n == 1);
}

TEST_CASE("error log limiter: bounded; the oldest cause is forgotten first", "[obs]") {
  error_log_limiter lim(5s, 2);
  const auto t0 = error_log_limiter::clock::time_point{} + 1h;
  std::uint64_t n = 0;
  CHECK(lim.due("a", t0, n));
  CHECK(lim.due("b", t0 + 1s, n));
  CHECK(lim.due("c", t0 + 2s, n));  // forgets "a", the oldest
  CHECK_FALSE(lim.due("b", t0 + 3s, n));
  CHECK_FALSE(lim.due("c", t0 + 3s, n));
  CHECK(lim.due("a", t0 + 3s, n));  // forgotten: due again, nothing counted; forgets "b"
  CHECK(n == 0);
  CHECK_FALSE(lim.due("a", t0 + 4s, n));
  CHECK(lim.due("b", t0 + 4s, n));  // its one unlogged line went with it
  CHECK(n == 0);
}
