#include <catch2/catch.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <memory>
#include <sstream>
#include <stdexcept>

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

TEST_CASE("error log limiter: bounded, the oldest cause is forgotten first", "[obs]") {
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

TEST_CASE("run_logged and logged_end: an exception out of a handler or a coroutine is a log line, not silence",
          "[obs]") {
  auto lines = std::make_shared<std::ostringstream>();
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*lines);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
  boost::asio::io_context ioc;
  bool after = false;
  // A handler throws; the one after it still runs on the same loop.
  boost::asio::post(ioc, [] { throw std::runtime_error("handler failed"); });
  boost::asio::post(ioc, [&] { after = true; });
  // A coroutine ends by an exception.
  auto failing = []() -> boost::asio::awaitable<void> {
    throw std::runtime_error("coroutine failed");
    co_return;
  };
  boost::asio::co_spawn(ioc, failing(), fg::obs::logged_end{"accept loop ended"});
  fg::obs::run_logged(ioc, "worker");
  spdlog::set_default_logger(previous);
  CHECK(after);
  CHECK_THAT(lines->str(), Catch::Contains("worker: handler failed"));
  CHECK_THAT(lines->str(), Catch::Contains("[error] accept loop ended: coroutine failed"));
}
