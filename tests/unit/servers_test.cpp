// The servers of an upstream without sockets: smooth weighted round robin (nginx's
// sequence), least_conn, the rendezvous hash (what moves when a server comes or goes),
// passive health (ejection after failures in a row, max_share, the growing backoff, the
// way back), the retry budget, health kept across a reload, and a request's choice
// moving to another server on a retry.
#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>

#include <cstdlib>
#include <map>
#include <string>

#include "config/loader.hpp"
#include "upstream/choice.hpp"
#include "upstream/health_checker.hpp"
#include "upstream/pool.hpp"
#include "upstream/servers.hpp"

namespace {

using namespace std::chrono_literals;
using fg::upstream::steady;

fg::config::snapshot load_upstream(const std::string& body) {
  auto r = fg::config::load_string("upstreams:\n  api:\n" + body +
                                       "routes:\n  - name: all\n    match: {path_prefix: /}\n    upstream: api\n",
                                   "test.yaml");
  for (const auto& e : r.errors) FAIL(e.str());
  return r.cfg;
}

std::string servers_yaml(const std::vector<std::pair<int, int>>& port_weight) {
  std::string out = "    servers:\n";
  for (auto [port, weight] : port_weight)
    out += "      - {address: \"127.0.0.1:" + std::to_string(port) + "\", weight: " + std::to_string(weight) + "}\n";
  return out;
}

struct rig {
  explicit rig(const std::string& body, const fg::upstream::server_set* previous = nullptr)
      : cfg(load_upstream(body)), set(fg::upstream::server_set::build(cfg->upstreams, previous)) {}
  const fg::upstream::upstream_servers& api() const { return set->of(0); }
  std::size_t pick(fg::upstream::pick_state& st, steady::time_point now = steady::now(),
                   std::span<const std::size_t> tried = {}, std::optional<std::uint64_t> key = std::nullopt) {
    auto i = fg::upstream::pick(api(), st, {cfg->upstreams[0].balance, key, tried, now});
    REQUIRE(i);
    return *i;
  }
  fg::config::snapshot cfg;
  std::shared_ptr<const fg::upstream::server_set> set;
};

// The server for key hash `h`, asked twice: the same both times.
std::size_t stable_pick(rig& r, fg::upstream::pick_state& st, std::uint64_t h) {
  const auto a = r.pick(st, steady::now(), {}, h);
  CHECK(r.pick(st, steady::now(), {}, h) == a);
  return a;
}

}  // namespace

TEST_CASE("servers: smooth weighted round robin gives nginx's sequence and exact shares", "[upstream]") {
  rig r(servers_yaml({{9001, 5}, {9002, 1}, {9003, 1}}));
  fg::upstream::pick_state st;
  std::string seq;
  for (int i = 0; i < 7; ++i) seq += static_cast<char>('a' + r.pick(st));
  CHECK(seq == "aabacaa");  // nginx's own example for weights 5, 1, 1

  rig w(servers_yaml({{9001, 1}, {9002, 2}, {9003, 3}}));
  fg::upstream::pick_state ws;
  int count[3] = {};
  for (int i = 0; i < 600; ++i) ++count[w.pick(ws)];
  CHECK(count[0] == 100);
  CHECK(count[1] == 200);
  CHECK(count[2] == 300);
}

TEST_CASE("servers: a pick passes over ejected and tried servers, and guesses when all are out", "[upstream]") {
  rig r(servers_yaml({{9001, 1}, {9002, 1}, {9003, 1}}));
  fg::upstream::pick_state st;
  const auto now = steady::now();
  r.api().servers[1].health->ejected_until = (now + 10s).time_since_epoch().count();
  for (int i = 0; i < 30; ++i) CHECK(r.pick(st, now) != 1);
  const std::size_t tried[] = {0};
  for (int i = 0; i < 10; ++i) CHECK(r.pick(st, now, tried) == 2);
  // Every untried server ejected: one of them anyway (a guess beats a certain 502).
  const std::size_t tried2[] = {0, 2};
  CHECK(r.pick(st, now, tried2) == 1);
  const std::size_t all[] = {0, 1, 2};
  CHECK_FALSE(fg::upstream::pick(r.api(), st, {fg::config::balance::round_robin, {}, all, now}));
  // Its time over, it is chosen again.
  int ones = 0;
  for (int i = 0; i < 30; ++i) ones += r.pick(st, now + 11s) == 1 ? 1 : 0;
  CHECK(ones == 10);
}

TEST_CASE("servers: least_conn picks the fewest in flight for its weight, ties in turn", "[upstream]") {
  rig r(servers_yaml({{9001, 1}, {9002, 1}, {9003, 2}}) + "    balance: least_conn\n");
  fg::upstream::pick_state st;
  auto& s = r.api().servers;
  s[0].health->active = 3;
  s[1].health->active = 0;
  s[2].health->active = 1;  // 1 / 2 = 0.5 per weight
  CHECK(r.pick(st) == 1);
  s[1].health->active = 2;  // 2 against 3 and 0.5: the weighted one
  CHECK(r.pick(st) == 2);
  s[0].health->active = 0;
  s[1].health->active = 0;
  s[2].health->active = 0;
  std::map<std::size_t, int> seen;
  for (int i = 0; i < 30; ++i) ++seen[r.pick(st)];
  CHECK(seen.size() == 3);  // ties go round, not always to the first
}

TEST_CASE("servers: the hash keeps a key's server, a server that comes or goes moves only its share", "[upstream]") {
  const std::string hash = "    balance: hash\n    hash_key: header:X-User\n";
  rig three(servers_yaml({{9001, 1}, {9002, 1}, {9003, 1}}) + hash);
  rig four(servers_yaml({{9001, 1}, {9002, 1}, {9003, 1}, {9004, 1}}) + hash);
  rig two(servers_yaml({{9001, 1}, {9003, 1}}) + hash);  // 9002 gone
  fg::upstream::pick_state st;
  auto addr = [](rig& r, std::size_t i) { return r.api().servers[i].address; };
  int moved_on_add = 0, per_server[3] = {};
  const int keys = 3000;
  for (int k = 0; k < keys; ++k) {
    const auto h = std::hash<std::string>{}("user-" + std::to_string(k));
    const auto before = stable_pick(three, st, h);
    ++per_server[before];
    const auto after = addr(four, four.pick(st, steady::now(), {}, h));
    if (after != addr(three, before)) {
      ++moved_on_add;
      CHECK(after == "127.0.0.1:9004");  // only to the new server
    }
    const auto removed = addr(two, two.pick(st, steady::now(), {}, h));
    if (addr(three, before) != "127.0.0.1:9002") CHECK(removed == addr(three, before));  // only 9002's keys move
  }
  // About a quarter moves to the fourth (3 standard deviations either side).
  CHECK(moved_on_add > keys / 4 - 3 * 24);
  CHECK(moved_on_add < keys / 4 + 3 * 24);
  for (int n : per_server) CHECK(std::abs(n - keys / 3) < 3 * 26);
}

TEST_CASE("servers: failures in a row eject a server, never past max_share, for a time that doubles", "[upstream]") {
  rig r(servers_yaml({{9001, 1}, {9002, 1}, {9003, 1}, {9004, 1}}) +
        "    eject: {failures: 3, base_time: 1s, max_time: 3s, max_share: 0.5}\n");
  const auto& u = r.api();
  const auto t0 = steady::now();
  using fg::upstream::failure_kind;
  CHECK_FALSE(fg::upstream::note_failure(u, 0, failure_kind::connect, 0, t0));
  CHECK_FALSE(fg::upstream::note_failure(u, 0, failure_kind::connect, 0, t0));
  fg::upstream::note_success(u, 0, t0);  // a success in between: the count starts again
  CHECK_FALSE(fg::upstream::note_failure(u, 0, failure_kind::connect, 0, t0));
  CHECK_FALSE(fg::upstream::note_failure(u, 0, failure_kind::connect, 0, t0));
  CHECK(fg::upstream::note_failure(u, 0, failure_kind::connect, 0, t0));
  CHECK(u.servers[0].health->ejected(t0 + 999ms));
  CHECK_FALSE(u.servers[0].health->ejected(t0 + 1001ms));
  // A second server may go (2 of 4), a third may not.
  for (int i = 0; i < 3; ++i) fg::upstream::note_failure(u, 1, failure_kind::reset, 0, t0);
  CHECK(u.servers[1].health->ejected(t0));
  for (int i = 0; i < 10; ++i) CHECK_FALSE(fg::upstream::note_failure(u, 2, failure_kind::timeout, 0, t0));
  CHECK_FALSE(u.servers[2].health->ejected(t0));
  // Back from its ejection, one failure sends it out again, for twice as long; then the
  // cap (3 s); a success ends the run.
  const auto t1 = t0 + 1001ms;
  CHECK(fg::upstream::note_failure(u, 0, failure_kind::connect, 0, t1));
  CHECK(u.servers[0].health->ejected(t1 + 1999ms));
  CHECK_FALSE(u.servers[0].health->ejected(t1 + 2001ms));
  const auto t2 = t1 + 2001ms;
  CHECK(fg::upstream::note_failure(u, 0, failure_kind::connect, 0, t2));
  CHECK_FALSE(u.servers[0].health->ejected(t2 + 3001ms));
  CHECK(u.servers[0].health->ejections == 3);
  CHECK_FALSE(fg::upstream::note_success(u, 0, t2 + 1s));  // answered while ejected: no end to it
  CHECK(u.servers[0].health->ejected(t2 + 1s));
  CHECK(fg::upstream::note_success(u, 0, t2 + 3001ms));  // back in service (logged)
  CHECK_FALSE(fg::upstream::note_success(u, 0, t2 + 3001ms));
  const auto t3 = t2 + 3001ms;
  CHECK_FALSE(fg::upstream::note_failure(u, 0, failure_kind::connect, 0, t3));  // three in a row again
}

TEST_CASE("servers: statuses count only where eject.statuses lists them, failures 0 never ejects", "[upstream]") {
  rig r(servers_yaml({{9001, 1}, {9002, 1}}) + "    eject: {failures: 1, statuses: [503]}\n");
  CHECK(fg::upstream::ejecting_status(r.api(), 503));
  CHECK_FALSE(fg::upstream::ejecting_status(r.api(), 500));
  rig never(servers_yaml({{9001, 1}, {9002, 1}}) + "    eject: {failures: 0}\n");
  for (int i = 0; i < 100; ++i)
    CHECK_FALSE(fg::upstream::note_failure(never.api(), 0, fg::upstream::failure_kind::connect, 0, steady::now()));
  CHECK(never.api().servers[0].health->failures == 100);
  // One server at the default max_share (0.5): never ejected.
  rig one("    address: \"127.0.0.1:9001\"\n    eject: {failures: 1}\n");
  CHECK_FALSE(fg::upstream::note_failure(one.api(), 0, fg::upstream::failure_kind::connect, 0, steady::now()));
}

TEST_CASE("servers: the retry budget is max(min, share x requests in flight)", "[upstream]") {
  rig r(servers_yaml({{9001, 1}, {9002, 1}}) + "    retry_budget: {share: 0.2, min: 3}\n");
  const auto& u = r.api();
  *u.retrying = 2;
  CHECK(fg::upstream::retry_allowed(u));
  *u.retrying = 3;
  CHECK_FALSE(fg::upstream::retry_allowed(u));
  u.servers[0].health->active = 60;
  u.servers[1].health->active = 40;  // 100 in flight: 20 retries
  *u.retrying = 19;
  CHECK(fg::upstream::retry_allowed(u));
  *u.retrying = 20;
  CHECK_FALSE(fg::upstream::retry_allowed(u));
}

TEST_CASE("servers: a reload keeps a kept server's health and starts a new one afresh", "[upstream]") {
  rig before(servers_yaml({{9001, 1}, {9002, 1}}));
  before.api().servers[1].health->failures = 7;
  rig after(servers_yaml({{9002, 3}, {9003, 1}}), before.set.get());
  CHECK(after.api().servers[0].health == before.api().servers[1].health);
  CHECK(after.api().servers[0].health->failures == 7);
  CHECK(after.api().servers[1].health->failures == 0);
  CHECK(after.api().retrying == before.api().retrying);
}

TEST_CASE("servers: a request's choice holds its server in flight and moves on a retry", "[upstream]") {
  boost::asio::io_context ioc;
  fg::upstream::pool pool(ioc.get_executor());
  rig r(servers_yaml({{9001, 1}, {9002, 1}, {9003, 1}}) + "    retries: 2\n    retry_budget: {min: 1}\n");
  pool.configure(r.cfg->upstreams);
  const auto& s = r.api().servers;
  {
    fg::upstream::choice c;
    c.begin(pool, r.cfg->upstreams[0], r.api(), std::nullopt, steady::now());
    const auto first = c.server();
    CHECK(s[first].health->active == 1);
    CHECK(c.retry(steady::now()));
    const auto second = c.server();
    CHECK(second != first);
    CHECK(s[first].health->active == 0);
    CHECK(s[second].health->active == 1);
    CHECK(s[second].health->retries == 1);
    CHECK(*r.api().retrying == 1);
    CHECK(c.retry(steady::now()));
    CHECK(c.server() != first);
    CHECK(c.server() != second);
    CHECK_FALSE(c.retry(steady::now()));  // retries: 2 spent
    c.end();
    CHECK(*r.api().retrying == 0);
    for (const auto& sv : s) CHECK(sv.health->active == 0);
  }
  {
    // One failure counted a request, however many servers it fails on; the retry's place
    // in the budget goes back with the response head, not at the request's end.
    fg::upstream::choice c;
    c.begin(pool, r.cfg->upstreams[0], r.api(), std::nullopt, steady::now());
    const auto first = c.server();
    c.failed(fg::upstream::failure_kind::reset, steady::now());
    REQUIRE(c.retry(steady::now()));
    c.failed(fg::upstream::failure_kind::reset, steady::now());
    std::uint64_t failures = 0;
    for (const auto& sv : s) failures += sv.health->failures;
    CHECK(failures == 1);
    CHECK(s[first].health->failures == 1);
    REQUIRE(c.retry(steady::now()));
    CHECK(*r.api().retrying == 1);
    c.answered(200, steady::now());
    CHECK(*r.api().retrying == 0);
    CHECK(s[c.server()].health->active == 1);  // still in flight: the response is relayed
    c.end();
    CHECK(*r.api().retrying == 0);
  }
  // The budget full (min 1, one retry in flight elsewhere): no retry.
  *r.api().retrying = 1;
  fg::upstream::choice c;
  c.begin(pool, r.cfg->upstreams[0], r.api(), std::nullopt, steady::now());
  CHECK_FALSE(c.retry(steady::now()));
}

TEST_CASE("servers: a long base_time doubled many times stays at max_time", "[upstream]") {
  // 3 h in ns shifted by 20 would overflow 64 bits: the ejection must stay 3 h.
  rig r(servers_yaml({{9001, 1}, {9002, 1}}) + "    eject: {failures: 1, base_time: 3h, max_time: 3h}\n");
  auto now = steady::now();
  for (int i = 0; i < 40; ++i) {
    REQUIRE(fg::upstream::note_failure(r.api(), 0, fg::upstream::failure_kind::connect, 0, now));
    CHECK(r.api().servers[0].health->ejected(now + std::chrono::hours(3) - 1s));
    CHECK_FALSE(r.api().servers[0].health->ejected(now + std::chrono::hours(3) + 1s));
    now += std::chrono::hours(3) + 2s;
  }
}

TEST_CASE("servers: fall failed checks in a row take a server out, rise passes bring it back", "[upstream][health]") {
  using fg::upstream::check_result;
  using fg::upstream::failure_kind;
  rig r(servers_yaml({{9001, 1}, {9002, 1}}) + "    health: {path: /healthz, rise: 2, fall: 3, statuses: [200, 204]}\n");
  const auto& u = r.api();
  CHECK(fg::upstream::check_passes(u.health, 204));
  CHECK_FALSE(fg::upstream::check_passes(u.health, 301));
  fg::config::health_check_config plain;
  CHECK(fg::upstream::check_passes(plain, 301));
  CHECK_FALSE(fg::upstream::check_passes(plain, 404));
  const auto& s = u.servers[0];
  const check_result bad{failure_kind::status, 503}, good{failure_kind::none, 200};
  CHECK_FALSE(fg::upstream::record_check(u, s, bad));
  CHECK_FALSE(fg::upstream::record_check(u, s, good));  // not in a row
  CHECK_FALSE(fg::upstream::record_check(u, s, bad));
  CHECK_FALSE(fg::upstream::record_check(u, s, bad));
  CHECK(fg::upstream::record_check(u, s, bad));  // the third in a row
  CHECK(s.health->check_failing.load());
  CHECK(s.health->check_status.load() == 503);
  // Out of service: the other server takes every pick.
  fg::upstream::pick_state st;
  for (int i = 0; i < 6; ++i) CHECK(r.pick(st) == 1);
  CHECK_FALSE(fg::upstream::record_check(u, s, good));
  CHECK(fg::upstream::record_check(u, s, good));
  CHECK_FALSE(s.health->check_failing.load());
  CHECK(s.health->checks.load() == 7);
  CHECK(s.health->check_failures.load() == 4);
  // A reload that turns the checks off puts a failing server back in service.
  fg::upstream::record_check(u, s, bad);
  fg::upstream::record_check(u, s, bad);
  fg::upstream::record_check(u, s, bad);
  REQUIRE(s.health->check_failing.load());
  rig off(servers_yaml({{9001, 1}, {9002, 1}}), r.set.get());
  CHECK_FALSE(off.api().servers[0].health->check_failing.load());
}

TEST_CASE("servers: checks in a row are the server's, kept through a reload that keeps it", "[upstream][health]") {
  using fg::upstream::check_result;
  using fg::upstream::failure_kind;
  const auto health = "    health: {path: /healthz, rise: 2, fall: 2}\n";
  rig r(servers_yaml({{9001, 1}, {9002, 1}}) + health);
  const check_result bad{failure_kind::status, 503}, good{failure_kind::none, 200};
  CHECK_FALSE(fg::upstream::record_check(r.api(), r.api().servers[0], bad));
  // A reload (or a name's new addresses) in between: the count goes on, not from 0.
  rig again(servers_yaml({{9001, 1}, {9002, 1}, {9003, 1}}) + health, r.set.get());
  CHECK(fg::upstream::record_check(again.api(), again.api().servers[0], bad));  // the second in a row
  CHECK(again.api().servers[0].health->check_failing.load());
  CHECK_FALSE(fg::upstream::record_check(again.api(), again.api().servers[0], good));
  rig third(servers_yaml({{9001, 1}, {9002, 1}}) + health, again.set.get());
  CHECK(fg::upstream::record_check(third.api(), third.api().servers[0], good));  // the second pass in a row
  CHECK_FALSE(third.api().servers[0].health->check_failing.load());
}
