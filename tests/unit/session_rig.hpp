#pragma once
// One worker's world for the tests of what serves requests (session_test.cpp,
// exchange_test.cpp): its context (the compiled configuration, the pool, a fake decision
// source, a connection count), a scripted upstream on a loopback socket, all on one
// io_context; and the responses a client read, parsed.
#include <catch2/catch.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "admin_fakes.hpp"
#include "fake_source.hpp"
#include "http/worker_context.hpp"
#include "upstream/pool.hpp"

namespace fg::test::rigs {


namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline constexpr auto rethrow = [](std::exception_ptr e) {
  if (e) std::rethrow_exception(e);
};
inline constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

// What the scripted upstream does with a request it has read.
struct reply {
  std::string bytes;   // written back as they are
  bool close = false;  // then closes the connection
  bool hang = false;   // answers nothing, and waits for the gateway to give up
};

inline reply ok(std::string_view body) {
  return {"HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + std::string(body)};
}

inline std::uint16_t closed_port(asio::io_context& ioc) {
  tcp::acceptor a(ioc, {asio::ip::address_v4::loopback(), 0});
  return a.local_endpoint().port();
}

// One worker's world: its context (the compiled configuration, the pool, the fake
// decision source, a connection count) and a scripted upstream, all on one io_context.
struct rig {
  fg::test::fake_source source;
  fg::http::limits_in_use limits{&source, 0};
  fg::http::connection_limit conns;
  fg::http::worker_context ctx;
  asio::io_context ioc;  // after what a session refers to: its frames go first
  fg::upstream::pool pool{ioc.get_executor()};
  tcp::acceptor upstream{ioc, {asio::ip::address_v4::loopback(), 0}};
  tcp::acceptor front{ioc, {asio::ip::address_v4::loopback(), 0}};
  std::function<reply(const bhttp::request<bhttp::string_body>&)> answer = [](const auto& req) {
    return ok(req.target());
  };
  std::vector<bhttp::request<bhttp::string_body>> seen;  // what the upstream was sent
  int accepted = 0;

  // `extra`: top-level YAML added to the configuration; `dead_upstream`: an upstream
  // address where nothing listens.
  explicit rig(const std::string& extra = "", bool dead_upstream = false) {
    fg::deadline::coarse_now = now;
    const auto port = dead_upstream ? closed_port(ioc) : upstream.local_endpoint().port();
    auto cfg = fg::test::load("upstreams:\n  api:\n    address: \"127.0.0.1:" + std::to_string(port) +
                              "\"\n    response_timeout: 5s\n"
                              "routes:\n  - name: all\n    match:\n      path_prefix: /\n    upstream: api\n"
                              "    limits:\n"
                              "      - {name: held, algorithm: concurrency, key: ip, limit: 100}\n"
                              "      - {name: gate, algorithm: fixed_window, key: ip, limit: 100, window: 1m}\n" +
                              extra);
    ctx.rt = fg::http::compiled_config::build(cfg);
    pool.configure(cfg->upstreams);
    ctx.pool = &pool;
    ctx.limits = &limits;
    ctx.connections = &conns;
    conns.max = 1000;
    asio::co_spawn(ioc, accept_upstream(), rethrow);
  }

  asio::awaitable<void> accept_upstream() {
    for (;;) {
      auto [ec, s] = co_await upstream.async_accept(tuple_awaitable);
      if (ec) co_return;
      ++accepted;
      asio::co_spawn(ioc, serve_upstream(std::move(s)), rethrow);
    }
  }

  asio::awaitable<void> serve_upstream(tcp::socket s) {
    beast::flat_buffer b;
    for (;;) {
      bhttp::request<bhttp::string_body> req;
      auto [ec, n] = co_await bhttp::async_read(s, b, req, tuple_awaitable);
      if (ec) co_return;
      seen.push_back(req);
      auto r = answer(req);
      if (r.hang) {
        char c;
        co_await s.async_read_some(asio::buffer(&c, 1), tuple_awaitable);  // until the gateway closes
        co_return;
      }
      if (!r.bytes.empty()) co_await asio::async_write(s, asio::buffer(r.bytes), tuple_awaitable);
      if (r.close) co_return;
    }
  }

  // Runs the loop until `done()` holds, calling `each()` between turns; fails past 10 s
  // (a session that hangs is a failure, not a slow pass).
  void run_until(const std::function<bool()>& done, const char* what, const std::function<void()>& each = {}) {
    const auto until = clock_type::now() + 10s;
    while (!done()) {
      if (clock_type::now() > until) FAIL("timed out waiting for " << what);
      if (each) each();
      ioc.run_one_for(5ms);
    }
  }
  // The sweeper's clock, moved by the test: a tick `d` after the last one.
  clock_type::time_point now = clock_type::now();
  void tick(clock_type::duration d) {
    now += d;
    ctx.deadlines.sweep(now);
  }

  // The leases handed out were all given back, and so was the connection count.
  void check_released() {
    CHECK(source.releases == source.holds);
    CHECK(conns.open.load() == 0);
  }
};

// The connection's place, taken as the acceptor takes it.
inline fg::http::connection_slot place(fg::http::connection_limit& conns) {
  auto slot = fg::http::connection_slot::take(&conns);
  REQUIRE(slot);
  return std::move(*slot);
}

}  // namespace fg::test::rigs
