// redis::connection against a real redis-server: a reply that comes after its command's
// deadline is never given to a later command; a connection whose server stops
// answering it is closed and made again; an idle one (and an idle subscriber) is
// probed and kept. A blocking command (BLPOP) makes the server stop answering one
// connection on purpose while it answers every other.
#include <catch2/catch.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "redis/connection.hpp"
#include "redis/error.hpp"
#include "redis_process.hpp"

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using fg::redis::connection;
using fg::redis::reply;
using error_code = boost::system::error_code;
using clock_type = std::chrono::steady_clock;

fg::config::redis_config config_for(const fg::test::redis_process& server, std::chrono::milliseconds timeout,
                                    std::chrono::milliseconds stall, std::chrono::milliseconds ping) {
  fg::config::redis_config rc;
  rc.addresses = {{"127.0.0.1", server.port}};
  rc.timeout = timeout;
  rc.stall_timeout = stall;
  rc.ping_interval = ping;
  return rc;
}

// Polls `done()` every 10 ms until it holds or `limit` passes: whether it held.
template <class Done>
asio::awaitable<bool> until(Done done, std::chrono::milliseconds limit) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  const auto end = clock_type::now() + limit;
  while (!done()) {
    if (clock_type::now() > end) co_return false;
    t.expires_after(10ms);
    co_await t.async_wait(asio::use_awaitable);
  }
  co_return true;
}

// The count in INFO commandstats' line for `name` (cmdstat_NAME:calls=N,...), 0 if none.
long long calls_of(const reply& info, const std::string& name) {
  const auto at = info.str.find("cmdstat_" + name + ":calls=");
  if (at == std::string::npos) return 0;
  return std::stoll(info.str.substr(at + name.size() + 15));
}

// Runs `body` on a fresh io_context for at most `limit`; fails if it did not finish.
void run(asio::io_context& ioc, std::function<asio::awaitable<void>()> body, std::chrono::seconds limit = 20s) {
  bool finished = false;
  std::exception_ptr error;
  auto wrapped = [&]() -> asio::awaitable<void> {
    try {
      co_await body();
    } catch (...) {
      error = std::current_exception();
    }
    finished = true;
  };
  asio::co_spawn(ioc, wrapped(), asio::detached);
  ioc.run_for(limit);
  if (error) std::rethrow_exception(error);
  REQUIRE(finished);
}

}  // namespace

TEST_CASE("connection: a reply after its command's deadline is never given to a later command", "[redis]") {
  fg::test::redis_process server;
  asio::io_context ioc;
  // A stall timeout far past the test: only the deadlines act here.
  auto conn = std::make_shared<connection>(ioc.get_executor(), config_for(server, 300ms, 60s, 60s), std::string());
  auto ctl = std::make_shared<connection>(ioc.get_executor(), config_for(server, 5000ms, 60s, 60s), std::string());
  conn->start();
  ctl->start();
  error_code blocked_ec, a_ec, b_ec, c_ec;
  std::string b_got, c_got;
  bool b_done = false, c_done = false;
  run(ioc, [&]() -> asio::awaitable<void> {
    const auto cond1 = [&] { return conn->connected() && ctl->connected(); };
    const bool ok1 = co_await until(cond1, 10000ms);
    REQUIRE(ok1);
    // The server holds this connection's replies behind a blocking command: A's reply
    // comes only after its deadline, behind BLPOP's.
    const std::vector<std::string> blpop{"BLPOP", "fgtest:late", "0"}, echo_a{"ECHO", "a"};
    conn->send(blpop, [&](error_code ec, reply) { blocked_ec = ec; });
    auto [ea, ra] = co_await conn->command(echo_a);
    a_ec = ea;
    // A has timed out; B and C go now, then the server is unblocked: the replies due are
    // BLPOP's, A's, B's and C's, in that order.
    const std::vector<std::string> echo_b{"ECHO", "b"}, echo_c{"ECHO", "c"}, push{"RPUSH", "fgtest:late", "x"};
    conn->send(echo_b, [&](error_code ec, reply r) {
      b_ec = ec;
      b_got = r.str;
      b_done = true;
    });
    conn->send(echo_c, [&](error_code ec, reply r) {
      c_ec = ec;
      c_got = r.str;
      c_done = true;
    });
    auto [ep, rp] = co_await ctl->command(push);
    REQUIRE_FALSE(ep);
    const auto cond2 = [&] { return b_done && c_done; };
    const bool ok2 = co_await until(cond2, 10000ms);
    REQUIRE(ok2);
    conn->stop();
    ctl->stop();
  });
  CHECK(blocked_ec == fg::redis::errc::timeout);
  CHECK(a_ec == fg::redis::errc::timeout);
  CHECK_FALSE(b_ec);
  CHECK(b_got == "b");
  CHECK_FALSE(c_ec);
  CHECK(c_got == "c");
}

TEST_CASE("connection: a connection its server stops answering is closed and made again", "[redis]") {
  fg::test::redis_process server;
  asio::io_context ioc;
  auto conn = std::make_shared<connection>(ioc.get_executor(), config_for(server, 100ms, 600ms, 60s), std::string());
  auto ctl = std::make_shared<connection>(ioc.get_executor(), config_for(server, 5000ms, 60s, 60s), std::string());
  conn->start();
  ctl->start();
  const auto stalled_before = fg::redis::connection_events::stalled.load();
  error_code echo_ec;
  std::string after, clients_after;
  clock_type::duration took{};
  run(ioc, [&]() -> asio::awaitable<void> {
    const auto cond3 = [&] { return conn->connected() && ctl->connected(); };
    const bool ok3 = co_await until(cond3, 10000ms);
    REQUIRE(ok3);
    // From here the server answers this connection nothing (it stays blocked), and
    // answers new connections at once: a hung flow, as a black hole makes one.
    const std::vector<std::string> blpop{"BLPOP", "fgtest:hang", "0"}, echo{"ECHO", "x"};
    const auto sent = clock_type::now();
    conn->send(blpop, [](error_code, reply) {});
    auto [ee, re] = co_await conn->command(echo);
    echo_ec = ee;
    const auto cond4 = [&] { return fg::redis::connection_events::stalled.load() > stalled_before; };
    const bool ok4 = co_await until(cond4, 10000ms);
    REQUIRE(ok4);
    took = clock_type::now() - sent;
    const auto cond5 = [&] { return conn->connected(); };
    const bool ok5 = co_await until(cond5, 10000ms);
    REQUIRE(ok5);
    const std::vector<std::string> ok{"ECHO", "answered"}, list{"CLIENT", "LIST"};
    auto [eo, ro] = co_await conn->command(ok);
    after = ro.str;
    // The hung connection itself is gone from the server (closed, not left behind).
    auto [el, rl] = co_await ctl->command(list);
    clients_after = rl.str;
    conn->stop();
    ctl->stop();
  });
  CHECK(echo_ec == fg::redis::errc::timeout);
  CHECK(fg::redis::connection_events::stalled.load() == stalled_before + 1);
  // Never before the stall timeout; the test's own bound far above it.
  CHECK(took >= 600ms);
  CHECK(took < 10s);
  CHECK(after == "answered");
  CHECK(clients_after.find("cmd=blpop") == std::string::npos);
}

TEST_CASE("connection: an idle connection and an idle subscriber are probed and kept", "[redis]") {
  fg::test::redis_process server;
  asio::io_context ioc;
  auto conn = std::make_shared<connection>(ioc.get_executor(), config_for(server, 100ms, 400ms, 100ms), std::string());
  auto sub = std::make_shared<connection>(ioc.get_executor(), config_for(server, 100ms, 400ms, 100ms), std::string());
  auto ctl = std::make_shared<connection>(ioc.get_executor(), config_for(server, 5000ms, 60s, 60s), std::string());
  std::vector<std::string> messages;
  sub->subscribe("fgtest-events", [&](std::string_view m) { messages.emplace_back(m); });
  conn->start();
  sub->start();
  ctl->start();
  const auto stalled_before = fg::redis::connection_events::stalled.load();
  long long pings = 0, subscribes = 0;
  std::string echoed;
  run(ioc, [&]() -> asio::awaitable<void> {
    const auto cond6 = [&] { return conn->connected() && sub->connected() && ctl->connected(); };
    const bool ok6 = co_await until(cond6, 10000ms);
    REQUIRE(ok6);
    // Several probe periods pass with nothing else sent: each is answered.
    const std::vector<std::string> info{"INFO", "commandstats"};
    asio::steady_timer t(ioc);
    const auto end = clock_type::now() + 15s;
    while ((pings < 6 || subscribes < 6) && clock_type::now() < end) {
      auto [ei, ri] = co_await ctl->command(info);
      pings = calls_of(ri, "ping");
      subscribes = calls_of(ri, "subscribe");
      t.expires_after(50ms);
      co_await t.async_wait(asio::use_awaitable);
    }
    const std::vector<std::string> publish{"PUBLISH", "fgtest-events", "hello"}, echo{"ECHO", "still"};
    auto [ep, rp] = co_await ctl->command(publish);
    const auto cond7 = [&] { return !messages.empty(); };
    const bool ok7 = co_await until(cond7, 5000ms);
    REQUIRE(ok7);
    auto [ee, re] = co_await conn->command(echo);
    echoed = re.str;
    conn->stop();
    sub->stop();
    ctl->stop();
  });
  CHECK(pings >= 6);
  CHECK(subscribes >= 6);
  CHECK(messages == std::vector<std::string>{"hello"});
  CHECK(echoed == "still");
  CHECK(fg::redis::connection_events::stalled.load() == stalled_before);
}
