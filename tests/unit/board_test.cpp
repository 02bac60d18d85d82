// deadline::board: an entry lives as long as its watch; a sweep expires what is due
// (cancelling the waits of both sockets), leaves the rest, takes back idle reads due to
// go lean without expiring them; cancel_idle reaches idle entries only; after() never
// fires early. Real loopback sockets with a pending read show what is cancelled.
#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <array>
#include <chrono>

#include "deadline/board.hpp"

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using clock_type = fg::deadline::clock;
using namespace std::chrono_literals;

// A connected socket with a read pending on it; `done` once the read completes.
struct reading {
  tcp::socket socket, peer;
  std::array<char, 16> buf{};
  bool done = false;
  boost::system::error_code ec;

  reading(asio::io_context& ioc, tcp::acceptor& a) : socket(ioc), peer(ioc) {
    socket.connect(a.local_endpoint());
    peer = a.accept();
    socket.async_read_some(asio::buffer(buf), [this](boost::system::error_code e, std::size_t) {
      done = true;
      ec = e;
    });
  }
};

struct rig {
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc, {asio::ip::address_v4::loopback(), 0}};
  fg::deadline::board board;
  clock_type::time_point t0 = clock_type::now();

  // Runs what is ready (a cancelled read completes at once).
  void settle() {
    ioc.restart();
    ioc.poll();
  }
};

}  // namespace

TEST_CASE("board: an entry is on the board while its watch lives", "[board]") {
  fg::deadline::board b;
  CHECK(b.empty());
  {
    auto w = b.open(nullptr);
    CHECK_FALSE(b.empty());
    auto moved = std::move(w);
    w.reset();  // a moved-from watch holds nothing
    CHECK_FALSE(b.empty());
  }
  CHECK(b.empty());
  auto a = b.open(nullptr), c = b.open(nullptr);
  a = std::move(c);  // a's own entry leaves; c's stays, now a's
  a.reset();
  CHECK(b.empty());
}

TEST_CASE("board: a sweep expires what is due and cancels both sockets' waits, and nothing else", "[board]") {
  rig r;
  reading due(r.ioc, r.acceptor), up(r.ioc, r.acceptor), later(r.ioc, r.acceptor);
  auto w_due = r.board.open(&due.socket);
  w_due->watch_upstream(&up.socket);
  w_due->set_busy();
  w_due->arm_at(r.t0 + 1s);
  auto w_later = r.board.open(&later.socket);
  w_later->set_busy();
  w_later->arm_at(r.t0 + 3s);
  auto w_null = r.board.open(nullptr);  // an entry with no socket is swept too
  w_null->arm_at(r.t0 + 1s);

  r.board.sweep(r.t0 + 999ms);
  r.settle();
  CHECK_FALSE(w_due->expired());
  CHECK_FALSE(due.done);

  r.board.sweep(r.t0 + 1s);
  r.settle();
  CHECK(w_due->expired());
  CHECK(w_due->deadline() == clock_type::time_point::max());
  CHECK(due.done);
  CHECK(due.ec == asio::error::operation_aborted);
  CHECK(up.done);
  CHECK(up.ec == asio::error::operation_aborted);
  CHECK(w_null->expired());
  CHECK_FALSE(w_later->expired());
  CHECK_FALSE(later.done);
  CHECK(fg::deadline::coarse_now == r.t0 + 1s);
  // Expired once: a later sweep does not cancel it again until it is armed again.
  w_due->arm(1s);
  CHECK_FALSE(w_due->expired());
}

TEST_CASE("board: an idle read past lean_at is taken back, not expired", "[board]") {
  rig r;
  reading idle(r.ioc, r.acceptor), busy(r.ioc, r.acceptor);
  auto w_idle = r.board.open(&idle.socket);
  w_idle->arm_at(r.t0 + 60s);
  w_idle->lean_at(r.t0 + 100ms);
  auto w_busy = r.board.open(&busy.socket);
  w_busy->set_busy();
  w_busy->arm_at(r.t0 + 60s);
  w_busy->lean_at(r.t0 + 100ms);  // not idle: never lean

  r.board.sweep(r.t0 + 99ms);
  r.settle();
  CHECK_FALSE(w_idle->lean());
  CHECK_FALSE(idle.done);

  r.board.sweep(r.t0 + 100ms);
  r.settle();
  CHECK(w_idle->lean());
  CHECK(w_idle->lean_at() == clock_type::time_point::max());
  CHECK_FALSE(w_idle->expired());
  CHECK(idle.done);
  CHECK(idle.ec == asio::error::operation_aborted);
  CHECK_FALSE(w_busy->lean());
  CHECK_FALSE(busy.done);
}

TEST_CASE("board: cancel_idle reaches idle entries only", "[board]") {
  rig r;
  reading idle(r.ioc, r.acceptor), busy(r.ioc, r.acceptor);
  auto w_idle = r.board.open(&idle.socket);
  auto w_busy = r.board.open(&busy.socket);
  w_busy->set_busy();
  r.board.cancel_idle();
  r.settle();
  CHECK(idle.done);
  CHECK_FALSE(busy.done);
  CHECK_FALSE(w_idle->expired());  // a drain's cancel is no timeout
}

TEST_CASE("board: a deadline set with after() never fires early", "[board]") {
  fg::deadline::board b;
  const auto t0 = clock_type::now();
  b.sweep(t0);  // coarse_now = t0
  auto w = b.open(nullptr);
  w->arm(200ms);
  // Ticks every sweep_interval, up to the moment the timeout has fully passed since t0.
  auto t = t0;
  for (; t < t0 + 200ms; t += fg::deadline::sweep_interval) {
    b.sweep(t);
    INFO("at " << std::chrono::duration_cast<std::chrono::milliseconds>(t - t0).count() << " ms");
    CHECK_FALSE(w->expired());
  }
  // ... and fires within two intervals after it.
  for (; !w->expired() && t <= t0 + 200ms + 2 * fg::deadline::sweep_interval; t += fg::deadline::sweep_interval)
    b.sweep(t);
  CHECK(w->expired());
}

TEST_CASE("board: expire_now ends the wait at once, and a wait begun again before the next sweep", "[board]") {
  rig r;
  reading first(r.ioc, r.acceptor);
  r.board.sweep(r.t0);
  auto w = r.board.open(&first.socket);
  w->set_busy();
  w->arm(60s);
  w->expire_now();
  r.settle();
  CHECK(w->expired());
  CHECK(first.done);
  CHECK(first.ec == asio::error::operation_aborted);
  // Its owner waits again without arming (a handshake's next step): the sweep ends it.
  bool again_done = false;
  first.socket.async_read_some(asio::buffer(first.buf), [&](boost::system::error_code, std::size_t) {
    again_done = true;
  });
  r.board.sweep(r.t0 + fg::deadline::sweep_interval);
  r.settle();
  CHECK(again_done);
}

TEST_CASE("an entry's hook ends the waits no socket holds, at the deadline and by expire_now", "[deadline]") {
  fg::deadline::board b;
  auto w = b.open(nullptr);
  int called = 0;
  w->on_expire([](void* n) { ++*static_cast<int*>(n); }, &called);
  w->arm_at(clock_type::now() + 1h);
  b.sweep(clock_type::now());
  CHECK(called == 0);
  CHECK_FALSE(w->expired());
  w->arm_at(clock_type::now());
  b.sweep(clock_type::now() + 1ms);
  CHECK(called == 1);
  CHECK(w->expired());
  w->arm_at(clock_type::now() + 1h);
  w->expire_now();
  CHECK(called == 2);
  CHECK(w->expired());
}

