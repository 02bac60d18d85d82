// http::connection_slot (a connection's place under http.max_connections, given back
// once however the connection ends) and http::detail::connection (a connection's
// stream, read buffer, deadline entry and place), on Beast's test stream and on a
// real socket where the deadline board must reach it.
#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/beast/_experimental/test/stream.hpp>

#include <array>
#include <chrono>
#include <optional>
#include <utility>

#include "http/connection.hpp"

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using test_stream = boost::beast::test::stream;
using namespace std::chrono_literals;

}  // namespace

TEST_CASE("connection_slot: a place taken is given back once, wherever it moved", "[connection]") {
  fg::http::connection_limit limit;
  limit.max = 2;
  {
    auto a = fg::http::connection_slot::take(&limit);
    REQUIRE(a);
    CHECK(limit.open.load() == 1);
    auto moved = std::move(*a);  // (a parked connection's, then a session's)
    CHECK(limit.open.load() == 1);
    fg::http::connection_slot assigned;
    assigned = std::move(moved);
    CHECK(limit.open.load() == 1);
    auto b = fg::http::connection_slot::take(&limit);
    REQUIRE(b);
    CHECK(limit.open.load() == 2);
    // Full: refused, and the count is as it was.
    CHECK_FALSE(fg::http::connection_slot::take(&limit));
    CHECK(limit.open.load() == 2);
    assigned = std::move(*b);  // the place it held goes back
    CHECK(limit.open.load() == 1);
  }
  CHECK(limit.open.load() == 0);
  // No limit (a worker with no count): a place that counts nowhere.
  auto none = fg::http::connection_slot::take(nullptr);
  CHECK(none);
}

TEST_CASE("connection: its entry is on the board for its life, and release gives the stream, place and deadline",
          "[connection]") {
  asio::io_context ioc;
  fg::http::connection_limit limit;
  limit.max = 10;
  fg::http::worker_context ctx;
  ctx.connections = &limit;
  test_stream client(ioc), server(ioc);
  client.connect(server);
  std::optional<fg::http::detail::connection<test_stream>::released> out;
  {
    fg::http::detail::connection<test_stream> c(ctx, std::move(server), *fg::http::connection_slot::take(&limit));
    CHECK_FALSE(ctx.deadlines.empty());
    CHECK(c.buffer().max_size() == fg::http::detail::connection<test_stream>::buffer_max);
    const auto at = fg::deadline::coarse_now + 30s;
    c.watch().arm_at(at);
    out.emplace(c.release());
    CHECK(out->idle_deadline == at);
  }
  CHECK(ctx.deadlines.empty());
  CHECK(limit.open.load() == 1);  // held by what was released
  out.reset();
  CHECK(limit.open.load() == 0);
}

TEST_CASE("connection: the sweeper cancels the wait of its own socket at the deadline", "[connection]") {
  asio::io_context ioc;
  fg::http::worker_context ctx;
  tcp::acceptor a(ioc, {asio::ip::address_v4::loopback(), 0});
  tcp::socket client(ioc);
  client.connect(a.local_endpoint());
  fg::http::detail::connection<tcp::socket> c(ctx, a.accept(), {});
  std::array<char, 16> buf{};
  bool done = false;
  boost::system::error_code got;
  c.stream().async_read_some(asio::buffer(buf), [&](boost::system::error_code ec, std::size_t) {
    done = true;
    got = ec;
  });
  const auto t0 = std::chrono::steady_clock::now();
  c.watch().set_busy();
  c.watch().arm_at(t0 + 1s);
  ctx.deadlines.sweep(t0 + 999ms);
  ioc.poll();
  CHECK_FALSE(done);
  ctx.deadlines.sweep(t0 + 1s);
  ioc.restart();
  ioc.poll();
  CHECK(done);
  CHECK(got == asio::error::operation_aborted);
  CHECK(c.watch().expired());
}
