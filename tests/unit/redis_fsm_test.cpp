#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "redis/backoff.hpp"
#include "redis/command_fsm.hpp"
#include "redis/connect_fsm.hpp"
#include "redis/liveness.hpp"

// The Redis connection's decisions without a socket: the connect state machine is fed
// what hiredis and the timers report, the command state machine the replies.
namespace {

using namespace std::chrono_literals;
using fg::redis::backoff;
using fg::redis::command_fsm;
using fg::redis::connect_action;
using fg::redis::connect_fsm;
using fg::redis::reply_action;
using fg::redis::reply_kind;
using fg::redis::setup_result;
using fg::redis::setup_step;
using act = fg::redis::connect_action_type;
using state = connect_fsm::state;

// Fails once more from `connecting`, and checks the wait it asks for.
connect_action refuse(connect_fsm& f, double r) {
  auto a = f.on_connect_failed("Connection refused", r);
  REQUIRE(a.type == act::wait);
  CHECK(f.current() == state::waiting);
  CHECK_FALSE(f.ready());
  CHECK(std::string(a.why) == "Connection refused");
  REQUIRE(f.on_timer().type == act::connect);
  return a;
}

}  // namespace

TEST_CASE("backoff: grows from base to cap, half fixed and half jitter", "[redis]") {
  backoff b(50ms, 2000ms);
  CHECK(b.next(0.0) == 25ms);  // 50 / 2
  CHECK(b.next(0.0) == 50ms);  // 100 / 2
  CHECK(b.next(0.999) == 199ms);  // 200 / 2 + 0.999 * 100
  CHECK(b.next(0.5) == 300ms);
  CHECK(b.attempts() == 4);
  for (int i = 0; i < 40; ++i) b.next(0.0);
  // Capped, and still jittered over [cap/2, cap).
  CHECK(b.next(0.0) == 1000ms);
  CHECK(b.next(0.999) == 1999ms);
  b.reset();
  CHECK(b.attempts() == 0);
  CHECK(b.next(0.0) == 25ms);
}

TEST_CASE("connect_fsm: start, connect, ready, start only once", "[redis]") {
  connect_fsm f;
  CHECK(f.current() == state::idle);
  CHECK_FALSE(f.ready());
  CHECK(f.start().type == act::connect);
  CHECK(f.current() == state::connecting);
  CHECK_FALSE(f.ready());  // user commands wait for the connect callback
  CHECK(f.start().type == act::none);
  auto a = f.on_connected();
  CHECK(a.type == act::ready);
  CHECK_FALSE(a.again);
  CHECK(f.ready());
  // A second connect callback (none is expected) changes nothing.
  CHECK(f.on_connected().type == act::none);
  CHECK(f.on_timer().type == act::none);  // a stale timer does not connect twice
  CHECK(f.ready());
}

TEST_CASE("connect_fsm: refused connects back off, growing, jittered, capped", "[redis]") {
  connect_fsm f;
  f.start();
  std::vector<std::chrono::milliseconds> low, high;
  for (int i = 0; i < 10; ++i) low.push_back(refuse(f, 0.0).delay);
  connect_fsm g;
  g.start();
  for (int i = 0; i < 10; ++i) high.push_back(refuse(g, 0.999).delay);
  CHECK(low == std::vector<std::chrono::milliseconds>{25ms, 50ms, 100ms, 200ms, 400ms, 800ms, 1000ms, 1000ms,
                                                     1000ms, 1000ms});
  for (std::size_t i = 0; i < high.size(); ++i) {
    // The random half: the same attempt, another draw, another delay below twice it.
    CHECK(high[i] > low[i]);
    CHECK(high[i] < 2 * low[i]);
  }
  CHECK(high.back() <= 2000ms);
  CHECK(f.attempts() == 10);
}

TEST_CASE("connect_fsm: an answer resets the backoff, a connect says it connected again", "[redis]") {
  connect_fsm f;
  f.start();
  refuse(f, 0.0);
  refuse(f, 0.0);
  CHECK(refuse(f, 0.0).delay == 100ms);
  auto up = f.on_connected();
  CHECK(up.type == act::ready);
  CHECK(up.again);
  // A connect alone resets nothing (a hung server's kernel accepts): the first answer does.
  CHECK(f.attempts() == 3);
  f.on_answered();
  CHECK(f.attempts() == 0);
  // Lost mid-flight: back to the first, shortest wait.
  auto lost = f.on_lost("Server closed the connection", 0.0);
  CHECK(lost.type == act::wait);
  CHECK(lost.delay == 25ms);
  CHECK(std::string(lost.why) == "Server closed the connection");
  CHECK_FALSE(f.ready());
  CHECK(f.on_timer().type == act::connect);
  auto again = f.on_connected();
  CHECK(again.type == act::ready);
  CHECK(again.again);  // the loss counted as an attempt
  // A first connect with no failure before it is no "again".
  connect_fsm g;
  g.start();
  CHECK_FALSE(g.on_connected().again);
}

TEST_CASE("connect_fsm: losses of connections that never answered keep growing the wait", "[redis]") {
  // A server that accepts and answers nothing (hung): each connection is closed for want
  // of a reply; the waits between them grow as for refusals.
  connect_fsm h;
  h.start();
  std::vector<std::chrono::milliseconds> waits;
  for (int i = 0; i < 8; ++i) {
    REQUIRE(h.on_connected().type == act::ready);
    waits.push_back(h.on_lost("stalled: no reply", 0.0).delay);
    REQUIRE(h.on_timer().type == act::connect);
  }
  CHECK(waits == std::vector<std::chrono::milliseconds>{25ms, 50ms, 100ms, 200ms, 400ms, 800ms, 1000ms, 1000ms});
}

TEST_CASE("connect_fsm: losses in a row keep growing until a connection answers", "[redis]") {
  connect_fsm f;
  f.start();
  f.on_connected();
  f.on_answered();
  CHECK(f.on_lost("closed", 0.0).delay == 25ms);
  CHECK(f.on_timer().type == act::connect);
  // Refused while the server restarts: the wait grows from where the loss left it.
  CHECK(f.on_connect_failed("Connection refused", 0.0).delay == 50ms);
  CHECK(f.on_timer().type == act::connect);
  CHECK(f.on_connect_failed("Connection refused", 0.0).delay == 100ms);
  // A loss while waiting is not counted twice.
  CHECK(f.on_lost("closed", 0.0).type == act::none);
  CHECK(f.current() == state::waiting);
}

TEST_CASE("connect_fsm: stop closes once, then every event is ignored", "[redis]") {
  SECTION("stopped while ready") {
    connect_fsm f;
    f.start();
    f.on_connected();
    CHECK(f.stop().type == act::close);
    CHECK_FALSE(f.ready());
    // hiredis reports the disconnect our own free causes: not logged, no reconnect.
    CHECK(f.on_lost("closed", 0.0).type == act::none);
    CHECK(f.on_timer().type == act::none);
    CHECK(f.stop().type == act::none);
    CHECK(f.start().type == act::none);
  }
  SECTION("stopped while waiting to reconnect") {
    connect_fsm f;
    f.start();
    f.on_connect_failed("Connection refused", 0.0);
    CHECK(f.stop().type == act::close);
    CHECK(f.on_timer().type == act::none);  // a timer that fired before its cancel
    CHECK(f.current() == state::stopped);
  }
  SECTION("stopped while connecting") {
    connect_fsm f;
    f.start();
    CHECK(f.stop().type == act::close);
    CHECK(f.on_connect_failed("cannot resolve Redis host", 0.0).type == act::none);
    CHECK(f.on_connected().type == act::none);
    CHECK_FALSE(f.ready());
  }
}

TEST_CASE("connect_fsm: setup commands, AUTH and SELECT only when configured, SCRIPT LOAD last", "[redis]") {
  fg::config::redis_config cfg;
  using args = std::vector<std::string>;
  auto plain = fg::redis::setup_commands(cfg, "return 1");
  REQUIRE(plain.size() == 1);
  CHECK(plain[0].step == setup_step::script_load);
  CHECK(plain[0].args == args{"SCRIPT", "LOAD", "return 1"});

  cfg.password = "s3cret";
  auto auth = fg::redis::setup_commands(cfg, "return 1");
  REQUIRE(auth.size() == 2);
  CHECK(auth[0].args == args{"AUTH", "s3cret"});

  cfg.username = "gate";
  cfg.database = 3;
  auto all = fg::redis::setup_commands(cfg, "return 1");
  REQUIRE(all.size() == 3);
  CHECK(all[0].step == setup_step::auth);
  CHECK(all[0].args == args{"AUTH", "gate", "s3cret"});
  CHECK(all[1].step == setup_step::select);
  CHECK(all[1].args == args{"SELECT", "3"});
  CHECK(all[2].step == setup_step::script_load);

  // A username without a password sends no AUTH (Redis would refuse it).
  cfg.password.clear();
  CHECK(fg::redis::setup_commands(cfg, "x")[0].step == setup_step::select);
}

TEST_CASE("connect_fsm: a failed AUTH or SELECT is logged and the connection kept", "[redis]") {
  connect_fsm f;
  f.start();
  f.on_connected();
  CHECK(connect_fsm::on_setup_reply(setup_step::auth, setup_result::ok).type == act::none);
  auto auth = connect_fsm::on_setup_reply(setup_step::auth, setup_result::error_reply);
  CHECK(auth.type == act::setup_failed);
  CHECK(std::string(auth.why) == "AUTH");
  auto select = connect_fsm::on_setup_reply(setup_step::select, setup_result::error_reply);
  CHECK(select.type == act::setup_failed);
  CHECK(std::string(select.why) == "SELECT");
  CHECK(std::string(connect_fsm::on_setup_reply(setup_step::script_load, setup_result::error_reply).why) ==
        "SCRIPT LOAD");
  // No reply (lost, timed out): the loss itself is what is logged.
  CHECK(connect_fsm::on_setup_reply(setup_step::auth, setup_result::no_reply).type == act::none);
  CHECK(f.ready());
}

TEST_CASE("command_fsm: a plain command gets its reply, or disconnected when lost", "[redis]") {
  command_fsm c;
  CHECK(c.on_reply(reply_kind::other, true) == reply_action::deliver);
  command_fsm lost;
  CHECK(lost.on_reply(reply_kind::lost, true) == reply_action::fail_lost);
  // A caller's own EVALSHA meeting NOSCRIPT is its business: it gets the error.
  command_fsm theirs;
  CHECK(theirs.on_reply(reply_kind::noscript, true) == reply_action::deliver);
}

TEST_CASE("command_fsm: EVALSHA meeting NOSCRIPT is sent once as EVAL", "[redis]") {
  command_fsm c(command_fsm::stage::evalsha);
  CHECK(c.on_reply(reply_kind::noscript, true) == reply_action::send_eval);
  CHECK(c.current() == command_fsm::stage::eval);
  // The EVAL meets NOSCRIPT too (no script cache at all): the caller gets it, no loop.
  CHECK(c.on_reply(reply_kind::noscript, true) == reply_action::deliver);

  command_fsm ok(command_fsm::stage::evalsha);
  CHECK(ok.on_reply(reply_kind::other, true) == reply_action::deliver);
  CHECK(ok.current() == command_fsm::stage::evalsha);

  // The connection is gone: nothing to send the EVAL on.
  command_fsm down(command_fsm::stage::evalsha);
  CHECK(down.on_reply(reply_kind::noscript, false) == reply_action::deliver);
  command_fsm lost(command_fsm::stage::evalsha);
  CHECK(lost.on_reply(reply_kind::lost, false) == reply_action::fail_lost);
}

TEST_CASE("command_fsm: a timed-out command is answered once and never retried", "[redis]") {
  command_fsm c(command_fsm::stage::evalsha);
  CHECK(c.on_deadline());
  CHECK(c.timed_out());
  CHECK_FALSE(c.on_deadline());  // the caller had its timeout already
  // The late reply, whatever it says, is dropped: the script may have run.
  CHECK(c.on_reply(reply_kind::noscript, true) == reply_action::discard);
  CHECK(c.current() == command_fsm::stage::evalsha);
  command_fsm late;
  late.on_deadline();
  CHECK(late.on_reply(reply_kind::other, true) == reply_action::discard);
  command_fsm gone;
  gone.on_deadline();
  CHECK(gone.on_reply(reply_kind::lost, false) == reply_action::discard);

  // The EVAL sent after NOSCRIPT has its own deadline, and is not retried either.
  command_fsm retried(command_fsm::stage::evalsha);
  REQUIRE(retried.on_reply(reply_kind::noscript, true) == reply_action::send_eval);
  CHECK(retried.on_deadline());
  CHECK(retried.on_reply(reply_kind::noscript, true) == reply_action::discard);
}

namespace {
using fg::redis::liveness;
using live = liveness::action;
const auto t0 = std::chrono::steady_clock::time_point{} + 1h;
}  // namespace

TEST_CASE("liveness: an idle connection is probed every probe_every, counted from its last input", "[redis]") {
  liveness l(1000ms, 1500ms);
  l.on_connecting(t0);
  l.on_ready(t0 + 10ms);
  CHECK(l.on_tick(t0 + 900ms, false) == live::none);
  CHECK(l.on_tick(t0 + 1010ms, false) == live::probe);
  // Input (a reply, a message) moves the next probe on.
  l.on_input(t0 + 1100ms);
  CHECK(l.on_tick(t0 + 2000ms, false) == live::none);
  CHECK(l.on_tick(t0 + 2100ms, false) == live::probe);
  CHECK(l.period() == 500ms);
}

TEST_CASE("liveness: something awaited with no input for stall_after closes the connection", "[redis]") {
  liveness l(1000ms, 1500ms);
  l.on_connecting(t0);
  l.on_ready(t0);
  // Idle for a long time, then a command: the stall is counted from when it was sent.
  l.on_sent(t0 + 10s, false);
  CHECK(l.on_tick(t0 + 11s, true) == live::none);
  CHECK(l.on_tick(t0 + 11490ms, true) == live::none);
  CHECK(l.on_tick(t0 + 11500ms, true) == live::close);
  CHECK(l.quiet(t0 + 11500ms) == 1500ms);
  // More commands sent while one waits do not restart the count.
  liveness m(1000ms, 1500ms);
  m.on_ready(t0);
  m.on_sent(t0 + 100ms, false);
  m.on_sent(t0 + 1s, true);
  m.on_sent(t0 + 1400ms, true);
  CHECK(m.on_tick(t0 + 1600ms, true) == live::close);
}

TEST_CASE("liveness: a slow server that still sends bytes is kept", "[redis]") {
  // Replies (or parts of one) keep coming, each later than the commands' own deadline.
  liveness l(1000ms, 1000ms);
  l.on_ready(t0);
  l.on_sent(t0, false);
  for (int i = 1; i <= 20; ++i) {
    l.on_input(t0 + i * 900ms);
    CHECK(l.on_tick(t0 + i * 900ms + 890ms, true) == live::none);
  }
  // Then nothing more.
  CHECK(l.on_tick(t0 + 20 * 900ms + 1000ms, true) == live::close);
}

TEST_CASE("liveness: a connect not done in stall_after is given up", "[redis]") {
  liveness l(5000ms, 1000ms);
  l.on_connecting(t0);
  CHECK(l.on_tick(t0 + 999ms, false) == live::none);
  CHECK(l.on_tick(t0 + 1000ms, false) == live::close);
  l.on_connecting(t0 + 2s);
  l.on_ready(t0 + 2500ms);
  // Connected and idle: the probe interval rules again.
  CHECK(l.on_tick(t0 + 3600ms, false) == live::none);
  CHECK(l.on_tick(t0 + 7500ms, false) == live::probe);
  CHECK(l.period() == 500ms);
}

TEST_CASE("liveness: the stall timeout derived from redis.timeout", "[redis]") {
  fg::config::redis_config c;
  CHECK(fg::config::effective_stall_timeout(c) == 1000ms);
  c.timeout = 400ms;
  CHECK(fg::config::effective_stall_timeout(c) == 2000ms);
  c.stall_timeout = 900ms;
  CHECK(fg::config::effective_stall_timeout(c) == 900ms);
}
