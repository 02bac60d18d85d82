// Tests for the pure parts of the admin's /limits: its query (parameters, bounds) and
// the keys it builds, which must be those a real request with the same attributes uses.
#include <catch2/catch.hpp>

#include "redis/error.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json/parse.hpp>
#include <boost/url/parse.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "admin/limits_query.hpp"
#include "admin_fakes.hpp"
#include "admin/routes.hpp"
#include "store/inspector.hpp"
#include "config/config.hpp"
#include "config/loader.hpp"
#include "limit/decision.hpp"
#include "limit/keys.hpp"
#include "util/text.hpp"

namespace cfg = fg::config;
using fg::limit::check;

namespace {

fg::admin::limits_query parse_ok(std::string_view target) {
  fg::admin::limits_query q;
  auto url = boost::urls::parse_origin_form(target);
  REQUIRE(url);
  auto bad = fg::admin::parse_limits_query(*url, q);
  if (bad) FAIL(bad->body);
  return q;
}

unsigned parse_status(std::string_view target) {
  fg::admin::limits_query q;
  auto url = boost::urls::parse_origin_form(target);
  REQUIRE(url);
  auto bad = fg::admin::parse_limits_query(*url, q);
  return bad ? bad->status : 200;
}

using fg::test::load;

const std::string kRoutes = R"(upstreams:
  api:
    address: "127.0.0.1:9000"
client_ip:
  ipv6_prefix: 64
routes:
  - name: r
    match:
      path_prefix: /
    upstream: api
    limits:
      - name: by-ip
        algorithm: fixed_window
        key: ip
        limit: 5
        window: 1m
      - name: by-key
        algorithm: fixed_window
        key: "header:X-Api-Key"
        limit: 5
        window: 1m
      - name: by-query
        algorithm: fixed_window
        key: "query:api_key"
        limit: 5
        window: 1m
      - name: by-cookie
        algorithm: fixed_window
        key: "cookie:sid"
        limit: 5
        window: 1m
        on_missing_key: skip
)";

std::optional<std::string_view> header_of(const void* ctx, std::string_view name) {
  const auto& h = *static_cast<const std::vector<std::pair<std::string, std::string>>*>(ctx);
  for (const auto& [n, v] : h)
    if (fg::util::iequals(n, name)) return std::string_view(v);
  return std::nullopt;
}

// The keys of route r for a real request with these parts, as the session builds them.
std::vector<std::string> request_keys(const cfg::config& c, std::string_view client, std::string_view query,
                                      const std::vector<std::pair<std::string, std::string>>& headers) {
  fg::limit::request_parts parts;
  parts.client = client;
  parts.query = query;
  parts.header = &header_of;
  parts.header_ctx = &headers;
  std::vector<check> checks;
  fg::limit::build_checks(checks, c.redis.key_prefix, c.routes[0], parts);
  std::vector<std::string> keys;
  for (const auto& k : checks) keys.push_back(k.key);
  return keys;
}

std::vector<std::string> inspected_keys(const cfg::config& c, std::string_view target) {
  auto q = parse_ok(target);
  std::string client;
  if (q.ip) client = fg::admin::client_key(*q.ip, c).value();
  fg::admin::synthetic_request req(q, client);
  std::vector<check> checks;
  fg::limit::build_checks(checks, c.redis.key_prefix, c.routes[0], req.parts());
  std::vector<std::string> keys;
  for (const auto& k : checks) keys.push_back(k.key);
  return keys;
}

}  // namespace

TEST_CASE("/limits query: its parameters, and what is refused", "[admin][inspect]") {
  auto q = parse_ok("/limits?route=r&ip=1.2.3.4&header.X-Api-Key=a%2Bb+c&query.api_key=x%20y+z&cookie.sid=s%3B1");
  CHECK(q.route == "r");
  CHECK(q.ip == "1.2.3.4");
  REQUIRE(q.headers.size() == 1);
  CHECK((q.headers[0].first == "X-Api-Key" && q.headers[0].second == "a+b+c"));  // decoded, '+' kept
  REQUIRE(q.query.size() == 1);
  CHECK(q.query[0].second == "x%20y+z");  // raw: the gateway decodes it as a request's
  REQUIRE(q.cookies.size() == 1);
  CHECK(q.cookies[0].second == "s%3B1");
  CHECK(parse_status("/limits") == 400);
  CHECK(parse_status("/limits?ip=1.2.3.4") == 400);
  CHECK(parse_status("/limits?route=") == 400);
  CHECK(parse_status("/limits?route=r&route=s") == 400);
  CHECK(parse_status("/limits?route=r&hdr.X=1") == 400);
  CHECK(parse_status("/limits?route=r&header.=1") == 400);
  std::string many = "/limits?route=r";
  for (int i = 0; i < 16; ++i) many += "&header.h" + std::to_string(i) + "=1";
  CHECK(parse_status(many) == 400);
  CHECK(parse_status("/limits?route=r&header.h=" + std::string(2100, 'a')) == 414);
}

TEST_CASE("/limits builds the keys a request with the same attributes uses", "[admin][inspect]") {
  auto c = load(kRoutes);
  // Header names in any case; query and cookie values decoded as the gateway decodes them.
  CHECK(inspected_keys(*c, "/limits?route=r&ip=1.2.3.4&header.x-api-key=K%2B1&query.api_key=a+b%21&cookie.sid=s%251") ==
        request_keys(*c, "1.2.3.4", "x=1&api_key=a+b%21", {{"X-API-KEY", "K+1"}, {"Cookie", "o=1; sid=s%251"}}));
  // IPv6 by its /64, IPv4-mapped IPv6 as IPv4, as the peer is keyed.
  CHECK(inspected_keys(*c, "/limits?route=r&ip=2001:db8:1:2:3:4:5:6")[0] == "floodgate:{r:by-ip:2001%3Adb8%3A1%3A2%3A%3A/64}");
  CHECK(inspected_keys(*c, "/limits?route=r&ip=::ffff:10.1.2.3")[0] == "floodgate:{r:by-ip:10.1.2.3}");
  // Missing sources: anonymous where the limit says so, skipped (no check) where it says skip.
  auto keys = inspected_keys(*c, "/limits?route=r&ip=1.2.3.4");
  CHECK(keys == request_keys(*c, "1.2.3.4", "", {}));
  CHECK(keys.size() == 3);
  CHECK(keys[1] == "floodgate:{r:by-key:%anon}");
  CHECK_FALSE(fg::admin::client_key("not-an-ip", *c));
}

// ---------------------------------------------------------------- GET /limits through serve()

namespace {

using fg::test::fake_status;

// Answers every check with `answer`, or fails with `ec`; counts its calls.
struct fake_inspector final : fg::store::inspector {
  fg::limit::decision answer;
  boost::system::error_code ec;
  int calls = 0;
  std::vector<std::string> keys;
  boost::asio::awaitable<boost::system::error_code> peek(const cfg::config&, std::span<const check> checks,
                                                         std::span<fg::limit::decision> out) override {
    ++calls;
    for (std::size_t i = 0; i < checks.size(); ++i) out[i] = answer, keys.push_back(checks[i].key);
    co_return ec;
  }
  std::vector<std::string> reset_keys;
  boost::asio::awaitable<boost::system::error_code> reset(const cfg::config&, std::span<const check> checks) override {
    for (const auto& c : checks) reset_keys.push_back(c.key);
    co_return ec;
  }
  std::vector<std::pair<std::string, std::uint64_t>> grants;  // (key, amount)
  boost::asio::awaitable<boost::system::error_code> grant(const cfg::config&, std::span<const check> checks) override {
    for (const auto& c : checks) grants.emplace_back(c.key, c.cost);
    co_return ec;
  }
};

fg::admin::reply serve(const std::string& target, fake_status& s, fake_inspector* insp, const char* method = "GET") {
  return fg::test::serve(method, target, s, {insp});
}

}  // namespace

TEST_CASE("/limits answers from the inspector per limit, 503 when the store cannot answer", "[admin][inspect]") {
  fake_status s(load(kRoutes));
  fake_inspector insp;
  insp.answer = {false, 5, 0, 1500, 1500};  // every limit denies, retry in 1.5 s
  auto r = serve("/limits?route=r&ip=1.2.3.4&cookie.sid=S", s, &insp);
  REQUIRE(r.status == 200);
  auto a = boost::json::parse(r.body).as_object();
  CHECK(a.at("next_request") == "denied");
  CHECK(a.at("retry_after_s") == 2);
  const auto& limits = a.at("limits").as_array();
  REQUIRE(limits.size() == 4);
  CHECK(limits[0].at("key") == "floodgate:{r:by-ip:1.2.3.4}");
  CHECK(limits[0].at("would_deny") == true);
  CHECK(limits[0].at("retry_after_ms") == 1500);
  CHECK(limits[1].at("anonymous") == true);
  CHECK(insp.keys.size() == 4);
  // the configuration at each call: a route gone after a reload is 404
  s.cfg = load(kRoutes + "  - name: extra\n    match:\n      path: /x\n    upstream: api\n");
  CHECK(serve("/limits?route=extra", s, &insp).status == 200);
  s.cfg = load(kRoutes);
  CHECK(serve("/limits?route=extra", s, &insp).status == 404);
  // no ip for a route whose limit keys on it: 400, and the store is not asked
  const int before = insp.calls;
  auto bad = serve("/limits?route=r", s, &insp);
  CHECK(bad.status == 400);
  CHECK(bad.body.find("by-ip") != std::string::npos);
  CHECK(insp.calls == before);
  insp.ec = boost::asio::error::timed_out;
  auto down = serve("/limits?route=r&ip=1.2.3.4", s, &insp);
  CHECK(down.status == 503);
  CHECK(boost::json::parse(down.body).at("error") == "store unreachable");
  CHECK(serve("/limits?route=r&ip=1.2.3.4", s, nullptr).status == 503);
  CHECK(serve("/limits?route=r&ip=1.2.3.4", s, &insp, "POST").status == 405);
  // the synchronous dispatch() knows the path but cannot answer it
  CHECK(fg::admin::dispatch("GET", "/limits?route=r", s).status == 503);
}

TEST_CASE("POST /limits/reset deletes the route's keys for such a request, 503 when the store cannot", "[admin][inspect]") {
  fake_status s(load(kRoutes));
  fake_inspector insp;
  auto r = serve("/limits/reset?route=r&ip=1.2.3.4", s, &insp, "POST");
  INFO(r.body);
  CHECK(r.status == 200);
  REQUIRE(insp.reset_keys.size() >= 1);
  CHECK(insp.reset_keys[0].find("1.2.3.4") != std::string::npos);
  CHECK(serve("/limits/reset?route=r&ip=1.2.3.4", s, &insp, "GET").status == 405);
  CHECK(serve("/limits/reset?route=nope&ip=1.2.3.4", s, &insp, "POST").status == 404);
  insp.ec = fg::redis::make_error_code(fg::redis::errc::not_connected);
  CHECK(serve("/limits/reset?route=r&ip=1.2.3.4", s, &insp, "POST").status == 503);
}

TEST_CASE("POST /limits/grant gives one limit's key back its amount, and checks its parameters", "[admin][inspect]") {
  fake_status s(load(kRoutes));
  fake_inspector insp;
  auto r = serve("/limits/grant?route=r&ip=1.2.3.4&limit=by-ip&amount=50", s, &insp, "POST");
  INFO(r.body);
  REQUIRE(r.status == 200);
  REQUIRE(insp.grants.size() == 1);
  CHECK(insp.grants[0].first.find("1.2.3.4") != std::string::npos);
  CHECK(insp.grants[0].second == 50);
  auto a = boost::json::parse(r.body).as_object();
  CHECK(a.at("granted").as_array() == boost::json::array{"by-ip"});
  CHECK(a.at("amount") == 50);
  // Without `limit`, every limit of the route that applies to such a request.
  insp.grants.clear();
  CHECK(serve("/limits/grant?route=r&ip=1.2.3.4&amount=1", s, &insp, "POST").status == 200);
  CHECK(insp.grants.size() >= 2);
  CHECK(serve("/limits/grant?route=r&ip=1.2.3.4&limit=nope&amount=1", s, &insp, "POST").status == 404);
  CHECK(serve("/limits/grant?route=r&ip=1.2.3.4", s, &insp, "POST").status == 400);
  for (const char* bad : {"0", "-1", "1.5", "x", "", "9007199254740993", "99999999999999999999999"})
    CHECK(serve(std::string("/limits/grant?route=r&ip=1.2.3.4&amount=") + bad, s, &insp, "POST").status == 400);
  CHECK(serve("/limits/grant?route=r&ip=1.2.3.4&amount=1", s, &insp, "GET").status == 405);
  // A reset of one limit; GET /limits takes neither.
  insp.reset_keys.clear();
  CHECK(serve("/limits/reset?route=r&ip=1.2.3.4&limit=by-ip", s, &insp, "POST").status == 200);
  CHECK(insp.reset_keys.size() == 1);
  CHECK(serve("/limits/reset?route=r&ip=1.2.3.4&amount=3", s, &insp, "POST").status == 400);
  CHECK(serve("/limits?route=r&ip=1.2.3.4&limit=by-ip", s, &insp).status == 400);
  insp.ec = fg::redis::make_error_code(fg::redis::errc::not_connected);
  CHECK(serve("/limits/grant?route=r&ip=1.2.3.4&amount=1", s, &insp, "POST").status == 503);
}
