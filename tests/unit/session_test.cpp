// http::detail::session as a unit: on beast::test::stream downstream (test::fail_count
// failing each read and write in turn), a scripted upstream on a loopback socket, and a
// fake decision source; and over real TCP sockets for what only a socket has (timeouts
// the deadline sweeper cancels, parking an idle connection and waking it). The sweeper
// is driven by the test (board::sweep with a time of its choosing): nothing waits on
// the clock.
#include <catch2/catch.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/_experimental/test/fail_count.hpp>
#include <boost/beast/_experimental/test/stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "session_rig.hpp"
#include "http/parked.hpp"
#include "http/session.hpp"
#include "http/session_read.ipp"
#include "http/session_write.ipp"

namespace {

using namespace fg::test::rigs;
using test_stream = beast::test::stream;

asio::awaitable<void> run_session(fg::http::worker_context& ctx, test_stream s, bool* ended) {
  fg::http::detail::session<test_stream> session(ctx, std::move(s), place(*ctx.connections),
                                                 fg::net::normalize(asio::ip::make_address("192.0.2.7")), false);
  co_await session.run();
  *ended = true;
}

// A client on a test stream, and the session serving it.
struct test_client {
  rig& r;
  test_stream client;
  bool ended = false;

  // `read_size`: the most one read of the session's returns.
  explicit test_client(rig& rg, beast::test::fail_count* fc = nullptr, std::size_t read_size = 0)
      : r(rg), client(rg.ioc.get_executor()) {
    test_stream server = fc ? test_stream(r.ioc, *fc) : test_stream(r.ioc);
    if (read_size) server.read_size(read_size);
    client.connect(server);
    asio::co_spawn(r.ioc, run_session(r.ctx, std::move(server), &ended), rethrow);
  }
  void send(std::string_view bytes) { asio::write(client, asio::buffer(bytes.data(), bytes.size())); }
  std::string_view received() const { return client.str(); }
  // Closes its side and waits for the session to end.
  void finish() {
    client.close();
    r.run_until([&] { return ended; }, "the session to end");
  }
};

// The complete responses in `text`, in order (an incomplete last one is left out).
std::vector<bhttp::response<bhttp::string_body>> responses(std::string_view text) {
  std::vector<bhttp::response<bhttp::string_body>> out;
  while (!text.empty()) {
    bhttp::response_parser<bhttp::string_body> p;
    p.eager(true);
    std::size_t used = 0;
    boost::system::error_code ec;
    while (!p.is_done() && used < text.size()) {
      auto n = p.put(asio::buffer(text.data() + used, text.size() - used), ec);
      used += n;
      if (ec || n == 0) break;
    }
    if (!p.is_done()) break;
    out.push_back(p.release());
    text.remove_prefix(used);
  }
  return out;
}

std::size_t count_responses(std::string_view text) { return responses(text).size(); }

const std::string get_a = "GET /a HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n";

}  // namespace

TEST_CASE("session: a request goes upstream and its answer comes back, leases and the count are given back",
          "[session]") {
  rig r;
  test_client c(r);
  c.send(get_a);
  r.run_until([&] { return count_responses(c.received()) == 1; }, "the response");
  auto res = responses(c.received());
  CHECK(res[0].result_int() == 200);
  CHECK(res[0].body() == "/a");
  REQUIRE(r.seen.size() == 1);
  CHECK(r.seen[0].target() == "/a");
  // The client's own claim is not passed on: it is no trusted proxy.
  CHECK(r.seen[0]["X-Forwarded-For"] == "192.0.2.7");
  CHECK(r.source.starts == 1);
  c.finish();
  CHECK(r.source.holds == 1);
  r.check_released();
}

TEST_CASE("session: pipelined requests are answered in order over one upstream connection", "[session]") {
  rig r;
  test_client c(r);
  c.send("GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n\r\nGET /3 HTTP/1.1\r\nHost: x\r\n\r\n");
  r.run_until([&] { return count_responses(c.received()) == 3; }, "three responses");
  auto res = responses(c.received());
  CHECK(res[0].body() == "/1");
  CHECK(res[1].body() == "/2");
  CHECK(res[2].body() == "/3");
  CHECK(r.accepted == 1);
  c.finish();
  CHECK(r.source.holds == 3);
  r.check_released();
}

TEST_CASE("session: requests split into single bytes are read whole", "[session]") {
  rig r;
  test_client c(r, nullptr, 1);
  const std::string req = "POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
  for (char ch : req) {
    c.send(std::string_view(&ch, 1));
    r.ioc.poll();
  }
  r.run_until([&] { return count_responses(c.received()) == 1; }, "the response");
  REQUIRE(r.seen.size() == 1);
  CHECK(r.seen[0].body() == "abc");
  c.finish();
  r.check_released();
}

TEST_CASE("session: 100-continue is sent before the body is read, and upstream hears of neither", "[session]") {
  rig r;
  r.answer = [](const auto& req) { return ok(req.body()); };
  test_client c(r);
  c.send("POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
  r.run_until([&] { return c.received().find("100 Continue") != std::string_view::npos; }, "100 Continue");
  CHECK(r.accepted == 0);  // nothing goes upstream before the body's first piece
  c.send("hello");
  r.run_until([&] { return count_responses(c.received()) == 2; }, "the final response");
  auto res = responses(c.received());
  CHECK(res[0].result_int() == 100);
  CHECK(res[1].result_int() == 200);
  CHECK(res[1].body() == "hello");
  REQUIRE(r.seen.size() == 1);
  CHECK(r.seen[0].count(bhttp::field::expect) == 0);
  c.finish();
  r.check_released();
}

TEST_CASE("session: each failure stage gets its answer, and every exit gives the leases back", "[session]") {
  struct row {
    const char* name;
    std::string request;
    unsigned status;
    reply upstream;            // what the upstream does (when it is reached)
    bool reaches_upstream;     // whether the upstream reads the request
    std::string extra = {};    // configuration
    bool dead_upstream = false;
    std::vector<std::string> deny = {};
    bool store_fails = false;
  };
  const std::string big(20000, 'a');
  const std::vector<row> rows = {
      {"a malformed head", "GET / HTTP/1.1\r\nHost x\r\n\r\n", 400, {}, false},
      {"a head over max_header_bytes", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n", 431, {}, false},
      {"an Expect other than 100-continue", "GET / HTTP/1.1\r\nHost: x\r\nExpect: x\r\n\r\n", 417, {}, false},
      {"a body over max_body_bytes", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789", 413,
       {}, false, "http:\n  max_body_bytes: 4\n"},
      {"a malformed chunked body", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400,
       {}, false},
      {"a limit denies", get_a, 429, {}, false, {}, false, {"gate"}},
      {"the store fails", get_a, 503, {}, false, {}, false, {}, true},
      {"upstream refuses the connection", get_a, 502, {}, false, {}, true},
      {"upstream closes before answering", get_a, 502, {"", true}, true},
      {"upstream answers what is not HTTP", get_a, 502, {"NOT HTTP AT ALL\r\n\r\n", true}, true},
      {"upstream answers a plain GET with 101",
       get_a, 502, {"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"}, true},
      {"upstream is silent past response_timeout", get_a, 504, {"", false, true}, true},
  };
  for (const auto& row : rows) {
    SECTION(row.name) {
      rig r(row.extra, row.dead_upstream);
      r.answer = [&](const auto&) { return row.upstream; };
      r.source.deny = row.deny;
      if (row.store_fails) r.source.fail = boost::asio::error::connection_reset;
      test_client c(r);
      c.send(row.request);
      // The sweeper a minute on, once the upstream holds the request: its wait times out.
      r.run_until([&] { return count_responses(c.received()) >= 1; }, row.name, [&] {
        if (row.upstream.hang && !r.seen.empty()) r.tick(60s);
      });
      auto res = responses(c.received());
      CHECK(res.back().result_int() == row.status);
      CHECK(r.seen.size() == (row.reaches_upstream ? 1u : 0u));
      c.finish();
      r.check_released();
    }
  }
}

TEST_CASE("session: a bad head after a request is answered as its own, nothing of the request before it",
          "[session]") {
  rig r;
  test_client c(r);
  // The request before it was a HEAD, and carried an id: the 400 has its body, no id.
  c.send("HEAD /a HTTP/1.1\r\nHost: x\r\nX-Request-Id: abc123\r\n\r\n");
  r.run_until([&] { return c.received().find("\r\n\r\n") != std::string_view::npos; }, "the HEAD's answer");
  const auto first = std::string(c.received());
  c.send("GET / HTTP/1.1\r\nHost x\r\n\r\n");
  r.run_until([&] { return c.ended || c.received().size() > first.size() + 20; }, "the 400");
  r.run_until([&] { return c.ended; }, "the close");
  auto rest = std::string(c.received().substr(first.size()));
  auto res = responses(rest);
  REQUIRE(res.size() == 1);
  CHECK(res[0].result_int() == 400);
  CHECK(res[0].body().size() == std::stoul(std::string(res[0][bhttp::field::content_length])));
  CHECK_FALSE(res[0].body().empty());
  CHECK(res[0].count("X-Request-Id") == 0);
  r.check_released();
}

TEST_CASE("session: a response cut short by upstream is cut short for the client", "[session]") {
  rig r;
  r.answer = [](const auto&) { return reply{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true}; };
  test_client c(r);
  c.send(get_a);
  r.run_until([&] { return c.ended; }, "the session to end");
  CHECK(c.received().substr(0, 15) == "HTTP/1.1 200 OK");
  CHECK(count_responses(c.received()) == 0);  // never completed: the client can tell
  r.check_released();
}

TEST_CASE("session: a read or write failing at any point ends the session with nothing held", "[session]") {
  const std::vector<std::string> requests = {
      "GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
      "POST /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
      "POST /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
  };
  for (const auto& request : requests) {
    int failed = 0;
    bool completed = false;
    for (std::size_t n = 1; n < 40 && !completed; ++n) {
      INFO(request << "failing operation " << n);
      rig r;
      beast::test::fail_count fc(n);
      test_client c(r, &fc, 8);  // several reads per message, each a point to fail at
      c.send(request);
      r.run_until([&] { return c.ended; }, "the session to end");
      auto res = responses(c.received());
      completed = !res.empty() && res.back().result_int() == 200;
      if (!completed) ++failed;
      r.check_released();
    }
    INFO(request);
    CHECK(completed);
    CHECK(failed >= 2);
  }
}

namespace {

// A client over a real TCP connection to a session started as the worker starts one.
struct tcp_client {
  rig& r;
  tcp::socket socket;
  std::string got;
  bool eof = false;
  std::array<char, 4096> buf{};

  explicit tcp_client(rig& rg) : r(rg), socket(rg.ioc) {
    socket.connect(r.front.local_endpoint());
    auto accepted = r.front.accept();
    const auto peer = accepted.remote_endpoint().address();
    fg::http::start_session(r.ctx, std::move(accepted), peer, place(r.conns));
    read();
  }
  void read() {
    socket.async_read_some(asio::buffer(buf), [this](boost::system::error_code ec, std::size_t n) {
      if (ec) {
        eof = true;
        return;
      }
      got.append(buf.data(), n);
      read();
    });
  }
  void send(std::string_view bytes) { asio::write(socket, asio::buffer(bytes.data(), bytes.size())); }
};

}  // namespace

TEST_CASE("session: a request head slower than header_timeout gets 408", "[session]") {
  rig r;
  tcp_client c(r);
  c.send("GET / HTTP/1.1\r\nHost: x\r\n");
  r.run_until([&] { return c.eof; }, "408 and the close", [&] { r.tick(60s); });
  CHECK(c.got.substr(0, 12) == "HTTP/1.1 408");
  CHECK(r.seen.empty());
  r.check_released();
}

TEST_CASE("session: an idle keep-alive connection is parked, woken by its next request, closed past idle_timeout",
          "[session]") {
  rig r;
  tcp_client c(r);
  c.send(get_a);
  r.run_until([&] { return count_responses(c.got) == 1; }, "the first response");
  CHECK(r.ctx.parked == 0);
  // Past lean_after: the session ends and the connection waits parked, holding no session.
  r.run_until([&] { return r.ctx.parked == 1; }, "the connection to park", [&] { r.tick(200ms); });
  c.send(get_a);
  r.run_until([&] { return count_responses(c.got) == 2; }, "the second response");
  CHECK(r.ctx.parked == 0);
  CHECK(r.accepted == 1);  // and its upstream connection was kept meanwhile
  r.run_until([&] { return r.ctx.parked == 1; }, "the connection to park again", [&] { r.tick(200ms); });
  CHECK(r.conns.open.load() == 1);  // parked is still open
  // Past idle_timeout (60 s by default), parked, it is closed with no answer.
  r.run_until([&] { return c.eof; }, "the close", [&] { r.tick(600s); });
  CHECK(count_responses(c.got) == 2);
  CHECK(r.ctx.parked == 0);
  r.check_released();
}

TEST_CASE("park: bytes that came before the wait wake the connection, their edge long taken", "[session]") {
  rig r;
  tcp::socket client(r.ioc);
  client.connect(r.front.local_endpoint());
  auto server = r.front.accept();
  asio::write(client, asio::buffer(get_a));
  // The event loop takes the bytes' readiness while nothing waits on the socket (as
  // after a read the sweeper took back). Edge-triggered, it would not be reported again;
  // Asio's async_wait re-arms the descriptor (EPOLL_CTL_MOD), which reports it anew.
  r.ioc.poll();
  bool woken = false;
  fg::http::detail::park(r.ctx, std::move(server), place(r.conns), r.now + 60s,
                         [&](fg::http::worker_context&, tcp::socket s, fg::http::connection_slot) {
                           woken = true;
                           s.close();
                         });
  r.run_until([&] { return woken; }, "the parked connection to wake");
  CHECK(r.ctx.parked == 0);
  r.check_released();
}

TEST_CASE("session: a drain closes an idle connection", "[session]") {
  rig r;
  tcp_client c(r);
  c.send(get_a);
  r.run_until([&] { return count_responses(c.got) == 1; }, "the response");
  r.ctx.draining = true;
  r.ctx.deadlines.cancel_idle();
  r.run_until([&] { return c.eof; }, "the close");
  r.check_released();
}
