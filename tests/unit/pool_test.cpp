// upstream::pool against loopback acceptors: connect (and its error), release and
// take_idle (reused, within max_idle, never one with bytes behind its response, never
// one whose peer closed), the idle counts, close_idle, idle_timeout, and a reload that keeps an
// upstream's address keeping its connections while one that moves it drops them and
// takes none made to the old address back.
#include <catch2/catch.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstring>
#include <sys/socket.h>
#include <exception>
#include <string>
#include <vector>

#include "admin_fakes.hpp"
#include "deadline/board.hpp"
#include "upstream/pool.hpp"

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

struct rig {
  asio::io_context ioc;
  tcp::acceptor a{ioc, {asio::ip::address_v4::loopback(), 0}}, b{ioc, {asio::ip::address_v4::loopback(), 0}};
  std::vector<tcp::socket> accepted;  // the upstream's ends
  fg::deadline::board board;
  fg::deadline::board::watch watch = board.open(nullptr);
  fg::upstream::pool pool{ioc.get_executor()};
  fg::config::snapshot cfg;

  explicit rig(tcp::acceptor& to, int max_idle = 2) { configure(to, max_idle); }
  rig() : rig(a) {}
  void configure(tcp::acceptor& to, int max_idle = 2) {
    cfg = fg::test::load("upstreams:\n  api:\n    address: \"127.0.0.1:" + std::to_string(to.local_endpoint().port()) +
                         "\"\n    max_idle: " + std::to_string(max_idle) +
                         "\nroutes:\n  - name: r\n    match: {path_prefix: /}\n    upstream: api\n");
    pool.configure(cfg->upstreams);
  }
  const fg::config::upstream_config& api() const { return cfg->upstreams[0]; }

  // A connection made to `a` and pooled.
  void pool_one() {
    boost::system::error_code ec;
    auto c = connect(a, ec);
    REQUIRE(c);
    pool.release("api", std::move(c));
  }

  // Takes the idle connection and gives it back, the loop running between, until the
  // pool no longer hands it out (true), or for 10 s (false).
  bool stops_handing_out() {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (auto got = pool.take_idle(api(), *watch)) {
      pool.release("api", std::move(got));
      if (std::chrono::steady_clock::now() > until) return false;
      ioc.run_one_for(5ms);
    }
    return true;
  }

  // pool.connect() run to its end; the upstream side accepted when it succeeded.
  fg::upstream::connection_ptr connect(tcp::acceptor& to, boost::system::error_code& ec) {
    return connect_to(api(), to, ec);
  }
  fg::upstream::connection_ptr connect_to(fg::config::upstream_config u, tcp::acceptor& to,
                                          boost::system::error_code& ec) {
    fg::upstream::connection_ptr out;
    bool done = false;
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          out = co_await pool.connect(u, *watch, ec);
          done = true;
        },
        [](std::exception_ptr e) {
          if (e) std::rethrow_exception(e);
        });
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!done) {
      if (std::chrono::steady_clock::now() > until) FAIL("connect never finished");
      ioc.run_one_for(5ms);
    }
    ioc.restart();
    if (out) accepted.push_back(to.accept());
    return out;
  }
};

}  // namespace

TEST_CASE("pool: a connection released is taken again, reused, up to max_idle", "[pool]") {
  rig r;
  boost::system::error_code ec;
  CHECK(r.pool.take_idle(r.api(), *r.watch) == nullptr);
  auto c1 = r.connect(r.a, ec);
  REQUIRE(c1);
  CHECK_FALSE(ec);
  CHECK_FALSE(c1->reused);
  CHECK(r.watch->watches_upstream(&c1->socket));  // the request's deadline covers it
  auto c2 = r.connect(r.a, ec), c3 = r.connect(r.a, ec);
  REQUIRE((c2 && c3));
  r.pool.release("api", std::move(c1));
  r.pool.release("api", std::move(c2));
  r.pool.release("api", std::move(c3));  // past max_idle 2: closed
  CHECK(r.pool.idle_count("api") == 2);
  CHECK(r.pool.idle_total() == 2);
  auto again = r.pool.take_idle(r.api(), *r.watch);
  REQUIRE(again);
  CHECK(again->reused);
  CHECK(r.pool.idle_count("api") == 1);
  r.pool.take_idle(r.api(), *r.watch);
  CHECK(r.pool.take_idle(r.api(), *r.watch) == nullptr);
  CHECK(r.pool.idle_total() == 0);
}

TEST_CASE("pool: a connection with bytes after its response is never pooled", "[pool]") {
  rig r;
  boost::system::error_code ec;
  auto c = r.connect(r.a, ec);
  REQUIRE(c);
  auto b = c->buffer.prepare(3);
  std::memcpy(b.data(), "xyz", 3);
  c->buffer.commit(3);
  r.pool.release("api", std::move(c));
  CHECK(r.pool.idle_count("api") == 0);
}

TEST_CASE("pool: an idle connection its peer closed is not handed out", "[pool]") {
  rig r;
  r.pool_one();
  r.accepted.back().close();  // the origin closes its idle connection
  // The FIN reaches our socket without anything running: poll until the probe sees it.
  if (!r.stops_handing_out()) FAIL("a closed connection was still handed out");
  CHECK(r.pool.idle_count("api") == 0);
}

TEST_CASE("pool: an idle connection its peer sent bytes on is not handed out, however soon", "[pool]") {
  rig r;
  r.pool_one();
  // A response nobody asked for, sent while the connection idles (the pool's clock does
  // not move: a reuse at once must look too).
  asio::write(r.accepted.back(), asio::buffer(std::string_view("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")));
  if (!r.stops_handing_out()) FAIL("a connection with unasked bytes was still handed out");
  CHECK(r.pool.idle_count("api") == 0);
}

TEST_CASE("pool: idle connections close after the upstream's idle_timeout, the oldest first", "[pool]") {
  rig r;  // idle_timeout: the default, 60 s
  boost::system::error_code ec;
  auto c1 = r.connect(r.a, ec), c2 = r.connect(r.a, ec);
  REQUIRE((c1 && c2));
  const auto t0 = fg::deadline::coarse_now;
  r.pool.release("api", std::move(c1));
  fg::deadline::coarse_now = t0 + 30s;
  r.pool.release("api", std::move(c2));
  r.pool.close_expired(t0 + 59s);
  CHECK(r.pool.idle_count("api") == 2);
  r.pool.close_expired(t0 + 60s);  // the first one's time
  CHECK(r.pool.idle_count("api") == 1);
  CHECK(r.pool.idle_total() == 1);
  // The origin sees that one closed, the other still open.
  auto peer_closed = [](tcp::socket& s) {
    char b;
    return ::recv(s.native_handle(), &b, 1, MSG_DONTWAIT) == 0;
  };
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!peer_closed(r.accepted[0]))
    if (std::chrono::steady_clock::now() > until) FAIL("the expired connection was not closed");
  CHECK_FALSE(peer_closed(r.accepted[1]));
  // Past its time between two of the sweeper's rounds: not handed out either.
  fg::deadline::coarse_now = t0 + 95s;
  CHECK(r.pool.take_idle(r.api(), *r.watch) == nullptr);
  CHECK(r.pool.idle_total() == 0);
  fg::deadline::coarse_now = t0;
}

TEST_CASE("pool: a refused connect is an error and no connection", "[pool]") {
  asio::io_context ioc;
  tcp::acceptor gone(ioc, {asio::ip::address_v4::loopback(), 0});
  rig r(gone);
  gone.close();
  boost::system::error_code ec;
  auto c = r.connect_to(r.api(), r.a, ec);
  CHECK(c == nullptr);
  CHECK(ec == asio::error::connection_refused);
  CHECK(r.watch->watches_upstream(nullptr));
}

TEST_CASE("pool: a reload keeps the idle connections of an upstream it keeps, drops those of one it moves",
          "[pool]") {
  rig r;
  boost::system::error_code ec;
  auto c = r.connect(r.a, ec);
  REQUIRE(c);
  r.pool.release("api", std::move(c));
  r.configure(r.a);  // same address
  CHECK(r.pool.idle_count("api") == 1);
  auto old_cfg = r.api();
  auto before_move = r.connect(r.a, ec);  // made under the old address, still in use
  REQUIRE(before_move);
  r.configure(r.b);  // moved
  CHECK(r.pool.idle_count("api") == 0);
  CHECK(r.pool.take_idle(old_cfg, *r.watch) == nullptr);  // a request of the old config gets none
  r.pool.release("api", std::move(before_move));
  CHECK(r.pool.idle_count("api") == 0);  // the old address's connection is not taken back
  auto fresh = r.connect(r.b, ec);
  REQUIRE(fresh);
  r.pool.release("api", std::move(fresh));
  CHECK(r.pool.idle_count("api") == 1);
  r.pool.close_idle();
  CHECK(r.pool.idle_total() == 0);
}

TEST_CASE("pool: a connection found empty at its take reads the answer that comes", "[pool]") {
  rig r;
  r.pool_one();
  auto c = r.pool.take_idle(r.api(), *r.watch);
  REQUIRE(c);
  if (c->look_on_send) return;  // (the batch looks: send_batch's test)
  // The answer, sent once the read waits, reaches it.
  char buf[32];
  std::string got;
  c->socket.async_read_some(asio::buffer(buf), [&](boost::system::error_code ec, std::size_t n) {
    got = ec ? "error: " + ec.message() : std::string(buf, n);
  });
  r.ioc.poll();
  CHECK(got.empty());
  const std::string answer = "HTTP/1.1 204 No Content\r\n\r\n";
  REQUIRE(::send(r.accepted.back().native_handle(), answer.data(), answer.size(), 0) ==
          static_cast<ssize_t>(answer.size()));
  r.ioc.restart();
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (got.empty() && std::chrono::steady_clock::now() < until) r.ioc.run_one_for(5ms);
  CHECK(got == answer);
}
