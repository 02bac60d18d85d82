// limit::decision_source: the policy decorator over a fake source (no sockets), the
// memory source, and lease release by the RAII guard when handling throws (memory, and
// Redis with a real redis-server).
#include <catch2/catch.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "limit/decision_source.hpp"
#include "store/memory_store.hpp"
#include "limit/policy.hpp"
#include "store/redis_batcher.hpp"
#include "store/script_call.hpp"
#include "limit/deny_cache.hpp"
#include "store/limiter_script.hpp"
#include "store/memory_source.hpp"
#include "store/redis_source.hpp"
#include "redis/connection.hpp"
#include "fake_source.hpp"
#include "redis_process.hpp"
#include "limit_configs.hpp"

namespace cfg = fg::config;
namespace asio = boost::asio;
using fg::limit::limit_call;
using fg::limit::status;
using std::chrono::milliseconds;

using fg::test::fake_source;
using fg::test::windowed;

namespace {

// Runs a call to completion on the policy, through wait() when it is pending.
status ask(fg::limit::decision_source& src, limit_call& c) {
  auto s = src.start(c);
  if (s != status::pending) return s;
  asio::io_context ioc;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        auto [ec] = co_await src.wait(c);
        s = src.finish(c, ec);
      },
      asio::detached);
  ioc.run();
  return s;
}

struct route_fixture {
  cfg::route_config route;
  limit_call call;
  explicit route_fixture(std::vector<cfg::limit_config> limits, cfg::on_store_error policy = cfg::on_store_error::allow) {
    route.name = "r";
    route.store_error = policy;
    route.limits = std::move(limits);
    reset();
  }
  void reset() {
    call.route = &route;
    call.client = "1.2.3.4";
    call.checks.clear();
    for (const auto& l : route.limits) call.checks.push_back({&l, "k:" + l.name, 1});
  }
};

}  // namespace

TEST_CASE("policy: a store error follows on_store_error (allow / deny / local) for every cause", "[limit][policy]") {
  using boost::system::error_code;
  const std::vector<error_code> causes = {fg::redis::make_error_code(fg::redis::errc::timeout),
                                          fg::redis::make_error_code(fg::redis::errc::protocol),
                                          fg::redis::make_error_code(fg::redis::errc::disconnected)};
  for (const auto& cause : causes) {
    for (auto policy_kind : {cfg::on_store_error::allow, cfg::on_store_error::deny, cfg::on_store_error::local}) {
      fake_source remote, local;
      local.remote = false;
      local.deny = {"tight"};
      remote.fail = cause;
      fg::limit::policy p(remote, local, nullptr, 0);
      std::vector<std::string> errors;
      p.set_log({}, [&](const std::string& line) { errors.push_back(line); });
      route_fixture f({windowed(cfg::algorithm::fixed_window, 1, 1000, "tight")}, policy_kind);
      auto s = ask(p, f.call);
      INFO(cause.message());
      if (policy_kind == cfg::on_store_error::allow) {
        CHECK(s == status::ok);
        CHECK(f.call.headers.empty());  // nothing was decided: no rate headers
        CHECK(local.starts == 0);
      } else if (policy_kind == cfg::on_store_error::deny) {
        CHECK(s == status::error);
        CHECK(local.starts == 0);
      } else {
        // local: this instance decides alone (here its store denies).
        CHECK(s == status::over_limit);
        CHECK(local.starts == 1);
        CHECK_FALSE(f.call.headers.empty());
      }
      REQUIRE(errors.size() == 1);
      CHECK(errors[0].find(cause.message()) != std::string::npos);
      CHECK(f.call.holder == nullptr);
      // Whatever the policy, a lease the lost answer may have granted is given back.
      CHECK(remote.unanswered == 1);
      CHECK(remote.releases == 0);
    }
  }
}

TEST_CASE("policy: the store-error log says one line per cause per interval, with the count it held back",
          "[limit][policy]") {
  fake_source remote, local;
  remote.fail = fg::redis::make_error_code(fg::redis::errc::timeout);
  fg::limit::policy p(remote, local, nullptr, 0);
  std::vector<std::string> errors;
  p.set_log({}, [&](const std::string& line) { errors.push_back(line); });
  route_fixture f({windowed(cfg::algorithm::fixed_window, 1, 1000, "a")});
  for (int i = 0; i < 50; ++i) {
    f.reset();
    CHECK(ask(p, f.call) == status::ok);
  }
  CHECK(errors.size() == 1);  // the next is due 5 s later
  CHECK(errors[0].find("0 more since the last report") != std::string::npos);
  // Another cause has a line of its own.
  remote.fail = fg::redis::make_error_code(fg::redis::errc::disconnected);
  f.reset();
  ask(p, f.call);
  CHECK(errors.size() == 2);
}

TEST_CASE("policy: a denial is cached until a round trip before it ends, the store is not asked meanwhile",
          "[limit][policy]") {
  fake_source remote, local;
  remote.deny = {"a"};
  remote.retry_ms = 300;
  fg::limit::deny_cache denies;
  fg::limit::policy p(remote, local, &denies, 0);
  route_fixture f({windowed(cfg::algorithm::fixed_window, 1, 1000, "a")});
  CHECK(ask(p, f.call) == status::over_limit);
  CHECK(remote.starts == 1);
  f.reset();
  CHECK(p.start(f.call) == status::over_limit);  // from the cache, at once
  CHECK(remote.starts == 1);
  // Past its end (less the round trip and 1 ms), the store is asked again.
  std::this_thread::sleep_for(milliseconds(300));
  remote.deny.clear();
  f.reset();
  CHECK(ask(p, f.call) == status::ok);
  CHECK(remote.starts == 2);
}

TEST_CASE("policy: a denial shorter than the round trip is not cached, nor is a shadow or concurrency one",
          "[limit][policy]") {
  fake_source remote, local;
  fg::limit::deny_cache denies;
  fg::limit::policy p(remote, local, &denies, 0);
  auto shadow = windowed(cfg::algorithm::fixed_window, 1, 1000, "s");
  shadow.shadow = true;
  auto conc = windowed(cfg::algorithm::concurrency, 1, 1000, "c");
  route_fixture f({windowed(cfg::algorithm::fixed_window, 1, 1000, "a"), shadow, conc});
  remote.deny = {"a"};
  remote.retry_ms = 2;  // <= round trip (1) + 1 + 1
  CHECK(ask(p, f.call) == status::over_limit);
  f.reset();
  CHECK(p.start(f.call) == status::pending);  // not cached: asks the store
  remote.deny = {"s", "c"};
  remote.retry_ms = 5000;
  f.reset();
  ask(p, f.call);
  f.reset();
  CHECK(p.start(f.call) == status::pending);
}

TEST_CASE("policy: a shadow limit's denial is logged, never enforced", "[limit][policy]") {
  fake_source remote, local;
  fg::limit::policy p(remote, local, nullptr, 0);
  std::vector<std::string> shadows;
  p.set_log([&](const std::string& line) { shadows.push_back(line); }, {});
  auto s = windowed(cfg::algorithm::fixed_window, 1, 1000, "soft");
  s.shadow = true;
  route_fixture f({s, windowed(cfg::algorithm::fixed_window, 10, 1000, "hard")});
  remote.deny = {"soft"};
  CHECK(ask(p, f.call) == status::ok);
  REQUIRE(shadows.size() == 1);
  CHECK(shadows[0] == "shadow limit r/soft would deny 1.2.3.4 (retry in 5000ms)");
  remote.deny = {"soft", "hard"};
  f.reset();
  CHECK(ask(p, f.call) == status::over_limit);
}

TEST_CASE("policy: no checks, no question, lease ids are unique and above the base", "[limit][policy]") {
  fake_source remote, local;
  fg::limit::policy p(remote, local, nullptr, 7ull << 48);
  route_fixture f({windowed(cfg::algorithm::fixed_window, 1, 1000, "a")});
  f.call.checks.clear();
  CHECK(p.start(f.call) == status::ok);
  CHECK(remote.starts == 0);
  f.reset();
  ask(p, f.call);
  auto first = f.call.lease;
  f.reset();
  ask(p, f.call);
  CHECK(first > (7ull << 48));
  CHECK(f.call.lease == first + 1);
}

namespace {
// An upload quota in bytes (cost: body_bytes) of 1000 a minute.
cfg::limit_config byte_quota(std::string name, bool shadow = false) {
  auto l = windowed(cfg::algorithm::fixed_window, 1000, 60000, std::move(name));
  l.cost_from = cfg::limit_config::cost_kind::body_bytes;
  l.shadow = shadow;
  return l;
}
}  // namespace

TEST_CASE("body_bytes_left: what the byte quotas' decisions left, the least of them, plus the 1 taken",
          "[limit][policy]") {
  route_fixture f({byte_quota("a"), byte_quota("b"), windowed(cfg::algorithm::fixed_window, 10, 1000, "count"),
                   byte_quota("shadow", true)});
  constexpr auto none = std::numeric_limits<std::uint64_t>::max();
  CHECK(fg::limit::body_bytes_left(f.call) == none);  // not asked yet
  f.call.asked = true;
  auto decided = [](std::uint64_t remaining) { return fg::limit::decision{true, 1000, remaining, 0, 0}; };
  f.call.decisions = {decided(500), decided(99), decided(0), decided(3)};
  CHECK(fg::limit::body_bytes_left(f.call) == 100);  // b's; not the count limit's, not the shadow one's
  f.call.decisions[1] = fg::limit::decision{};        // the failure policy let it through: no store said
  CHECK(fg::limit::body_bytes_left(f.call) == 501);
  f.call.decisions[0] = fg::limit::decision{};
  CHECK(fg::limit::body_bytes_left(f.call) == none);
}

TEST_CASE("deny_over_body_quota: the byte quotas a body passed become denials, retried at their reset",
          "[limit][policy]") {
  route_fixture f({byte_quota("a"), byte_quota("b"), windowed(cfg::algorithm::fixed_window, 10, 1000, "count"),
                   byte_quota("shadow", true), byte_quota("unstored")});
  f.call.asked = true;
  auto decided = [](std::uint64_t remaining, std::int64_t reset) {
    return fg::limit::decision{true, 1000, remaining, reset, 0};
  };
  f.call.decisions = {decided(500, 7000), decided(99, 0), decided(0, 900), decided(3, 900), fg::limit::decision{}};
  fg::limit::deny_over_body_quota(f.call, 200);  // past b's 100, within a's 501
  CHECK(f.call.decisions[0].allowed);
  CHECK(!f.call.decisions[1].allowed);
  CHECK(f.call.decisions[1].remaining == 0);
  CHECK(f.call.decisions[1].retry_ms == 1);  // (a reset of 0: at least 1 ms)
  CHECK(f.call.decisions[2].allowed);        // not a byte quota
  CHECK(f.call.decisions[3].allowed);        // shadow: reported, never enforced
  CHECK(f.call.decisions[4].allowed);        // no store decided (the failure policy let it through)
  fg::limit::deny_over_body_quota(f.call, 600);
  CHECK(!f.call.decisions[0].allowed);
  CHECK(f.call.decisions[0].retry_ms == 7000);
}

TEST_CASE("lease_guard: a request whose handling throws gives its concurrency lease back (memory)",
          "[limit][policy]") {
  fg::store::memory_store store;
  fg::store::memory_source mem(store);
  fg::limit::policy p(mem, mem, nullptr, 0);
  route_fixture f({windowed(cfg::algorithm::concurrency, 1, 60000, "c")});
  auto handle = [&] {
    fg::limit::lease_guard guard(f.call);
    f.reset();
    REQUIRE(p.start(f.call) == status::ok);
    REQUIRE(f.call.holder == &mem);
    throw std::runtime_error("handler failed");
  };
  CHECK_THROWS(handle());
  CHECK(f.call.holder == nullptr);
  // The one lease is free again: the next request gets it, and holds it.
  f.reset();
  CHECK(p.start(f.call) == status::ok);
  limit_call other;
  other.route = &f.route;
  other.checks = f.call.checks;
  CHECK(p.start(other) == status::over_limit);
}

using fg::test::redis_process;

TEST_CASE("lease_guard: a request whose handling throws gives its concurrency lease back (Redis)",
          "[limit][policy][redis]") {
  redis_process server;
  asio::io_context ioc;
  cfg::redis_config rc;
  rc.addresses = {{"127.0.0.1", server.port}};
  rc.timeout = milliseconds(1000);
  auto conn = std::make_shared<fg::redis::connection>(ioc.get_executor(), rc, fg::store::limiter_script);
  conn->start();
  fg::store::redis_batcher batcher(ioc.get_executor(), conn);
  fg::store::redis_source redis(batcher, "test-");
  fg::store::memory_store store;
  fg::store::memory_source mem(store);
  fg::limit::policy p(redis, mem, nullptr, 0);
  route_fixture f({windowed(cfg::algorithm::concurrency, 1, 60000, "c")}, cfg::on_store_error::deny);
  f.call.checks[0].key = "fg-test:{c}";
  std::string thrown;
  long long held_inside = -1, held_after = -1;
  auto request = [&]() -> asio::awaitable<void> {
    fg::limit::lease_guard guard(f.call);
    auto s = p.start(f.call);
    auto [ec] = co_await p.wait(f.call);
    s = p.finish(f.call, ec);
    if (s != status::ok) throw std::logic_error("not admitted: " + ec.message());
    // (GCC 12: no braced temporary inside a co_await expression.)
    std::vector<std::string> zcard{"ZCARD", "fg-test:{c}"};
    auto [e1, r1] = co_await conn->command(zcard);
    held_inside = r1.integer;
    throw std::runtime_error("handler failed");
  };
  auto check = [&]() -> asio::awaitable<void> {
    // Wait for the connection (polled, with a deadline).
    asio::steady_timer t(ioc);
    for (int i = 0; i < 200 && !conn->connected(); ++i) {
      t.expires_after(milliseconds(10));
      co_await t.async_wait(asio::use_awaitable);
    }
    try {
      co_await request();
    } catch (const std::exception& e) {
      thrown = e.what();
    }
    std::vector<std::string> zcard{"ZCARD", "fg-test:{c}"};
    auto [e2, r2] = co_await conn->command(zcard);
    held_after = r2.integer;
    conn->stop();
  };
  asio::co_spawn(ioc, check(), asio::detached);
  ioc.run_for(std::chrono::seconds(10));
  CHECK(thrown == "handler failed");
  CHECK(held_inside == 1);
  CHECK(held_after == 0);
}
