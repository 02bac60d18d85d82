// Plans (a limit's numbers per consumer) and what a denied client is told: the loader's
// plans, consumer files, the plan a request gets, and the problem-details bodies.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <openssl/evp.h>

#include "config/loader.hpp"
#include "limit/consumers.hpp"
#include "limit/denial.hpp"
#include "limit/keys.hpp"
#include "limit/rate_headers.hpp"
#include "limit_configs.hpp"

namespace cfg = fg::config;
namespace lim = fg::limit;

namespace {

const std::string kHead =
    "upstreams:\n  api:\n    address: \"127.0.0.1:9000\"\nroutes:\n  - name: r\n    match: { path: /x }\n"
    "    upstream: api\n    limits:\n";

cfg::load_result load(const std::string& limits) { return cfg::load_string(kHead + limits, "test.yaml"); }

std::string errors(const cfg::load_result& r) {
  std::string s;
  for (const auto& e : r.errors) s += e.str() + "\n";
  return s;
}

using fg::test::header_map;
using fg::test::parts;

std::string sha256_hex(std::string_view s) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_Digest(s.data(), s.size(), d, &n, EVP_sha256(), nullptr);
  std::string out;
  char buf[3];
  for (unsigned i = 0; i < n; ++i) std::snprintf(buf, sizeof buf, "%02x", d[i]), out += buf;
  return out;
}

std::string write_file(const std::string& name, const std::string& text) {
  auto path = (std::filesystem::temp_directory_path() / ("fg-plans-" + name)).string();
  std::ofstream(path) << text;
  return path;
}

const std::string kPlanned =
    "      - name: per-key\n        algorithm: fixed_window\n        key: header:X-Api-Key\n        limit: 3\n"
    "        window: 1h\n        plans:\n          from: header:X-Plan\n          gold: { limit: 5 }\n"
    "          partner: unlimited\n";

}  // namespace

TEST_CASE("plans: each a copy of its limit with its own numbers, the limit's own the default", "[plans]") {
  auto r = load(kPlanned);
  INFO(errors(r));
  REQUIRE(r.ok());
  const auto& l = r.cfg->routes[0].limits[0];
  CHECK(l.choice.how == cfg::plan_choice::by::source);
  CHECK(l.choice.from.name == "X-Plan");
  REQUIRE(l.plans.size() == 3);
  CHECK(l.plans[0].plan == "gold");
  CHECK(l.plans[0].limit == 5);
  CHECK(l.plans[0].window == std::chrono::hours(1));  // left out: the limit's
  CHECK(l.plans[1].unlimited);
  CHECK(l.plans[2].plan == "default");
  CHECK(l.plans[2].limit == 3);
  CHECK(l.choice.default_plan == 2);
  for (const auto& p : l.plans) CHECK(p.name == "per-key");
}

TEST_CASE("the loader writes each limit's and each plan's RateLimit-Policy item once", "[plans]") {
  auto r = load(kPlanned +
                "      - name: uploads\n        algorithm: token_bucket\n        key: ip\n        rate: 10/s\n"
                "        burst: 20000\n        cost: body_bytes\n");
  INFO(errors(r));
  REQUIRE(r.ok());
  const auto& l = r.cfg->routes[0].limits[0];
  CHECK(l.rate_policy == R"("per-key";q=3;w=3600)");
  CHECK(l.plans[0].rate_policy == R"("per-key";q=5;w=3600;plan="gold")");
  CHECK(l.plans[2].rate_policy == R"("per-key";q=3;w=3600;plan="default")");
  const auto& up = r.cfg->routes[0].limits[1];
  CHECK(up.rate_policy == R"("uploads";q=20000;w=2000;qu="content-bytes")");
  for (const auto* c : {&l, &l.plans[0], &l.plans[2], &up}) CHECK(c->rate_policy == cfg::rate_policy_item(*c, cfg::quota(*c)));

  // A response copies it; a decision with another quota has its item formatted.
  auto marked = l.plans[0];
  marked.rate_policy = "(the loader's copy)";
  std::vector<lim::check> checks{{&marked, "k", 1}};
  std::string out;
  lim::append_rate_headers(out, cfg::headers_mode::ietf, checks, std::vector<lim::decision>{{true, 5, 4, 1000, 0}}, false);
  CHECK(out.find("RateLimit-Policy: (the loader's copy)\r\n") != std::string::npos);
  out.clear();
  lim::append_rate_headers(out, cfg::headers_mode::ietf, checks, std::vector<lim::decision>{{true, 7, 4, 1000, 0}}, false);
  CHECK(out.find(R"(RateLimit-Policy: "per-key";q=7;w=3600;plan="gold")") != std::string::npos);
}

TEST_CASE("plans: what the loader refuses, at its line", "[plans]") {
  struct bad {
    std::string limits;
    std::string message;
  };
  const std::string base =
      "      - name: l\n        algorithm: gcra\n        key: header:K\n        rate: 10/s\n        plans:\n";
  const std::vector<bad> cases = {
      {base + "          gold: { rate: 1/s }\n", "plans needs from"},
      {base + "          from: header:P\n          consumers: c.txt\n", "plans needs from"},
      {base + "          from: ip\n", "plans.from is a header"},
      {base + "          from: header:P\n          gold: { limit: 3 }\n", "unknown key 'limit'"},
      {base + "          from: header:P\n          gold: lots\n", "must be unlimited or a mapping of rate and burst"},
      {base + "          from: header:P\n          b@d: { rate: 1/s }\n", "invalid plan name"},
      {base + "          from: header:P\n          unknown: maybe\n", "expected one of"},
      {base + "          from: header:P\n          gold: { rate: 1/s, burst: 1 }\n", ""},
      {"      - name: l\n        algorithm: fixed_window\n        key: [ip, header:K]\n        limit: 3\n"
       "        window: 1s\n        plans:\n          consumers: c.txt\n",
       "plans.consumers needs consumer_key"},
      {"      - name: l\n        algorithm: fixed_window\n        limit: 3\n        window: 1s\n        cost: 2\n"
       "        plans:\n          from: header:P\n          tiny: { limit: 1 }\n",
       "cost is larger than limit"},
  };
  for (const auto& c : cases) {
    auto r = load(c.limits);
    INFO(c.limits << "\n" << errors(r));
    if (c.message.empty()) {
      CHECK(r.ok());
    } else {
      REQUIRE_FALSE(r.ok());
      CHECK(errors(r).find(c.message) != std::string::npos);
    }
  }
}

TEST_CASE("consumer files: digests to plans, and every line's problem with its number", "[plans]") {
  const auto gold = sha256_hex("key-gold"), free = sha256_hex("key-free");
  std::string error;
  auto path = write_file("ok.txt", "# consumers\n\n" + gold + " gold\n  " + free + "\tfree  \r\n");
  auto map = lim::consumer_map::load(path, error);
  INFO(error);
  REQUIRE(map);
  CHECK(map->size() == 2);
  CHECK(map->plan_of("key-gold") == std::optional<std::string_view>("gold"));
  CHECK(map->plan_of("key-free") == std::optional<std::string_view>("free"));
  CHECK_FALSE(map->plan_of("key-other"));
  CHECK_FALSE(map->plan_of(""));
  REQUIRE(map->plans().size() == 2);
  CHECK(map->plans()[0] == std::pair<std::string, std::size_t>("gold", 3));

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"abc gold\n", ":1: want a key's SHA-256"},
      {gold + "\n", ":1: want a key's SHA-256"},
      {gold.substr(0, 63) + "g gold\n", ":1: want a key's SHA-256"},
      {"\n" + gold + " go/ld\n", ":2: want a plan name"},
      {gold + " gold\n" + gold + " free\n", "a key is listed twice"},
  };
  for (const auto& [text, want] : bad) {
    INFO(text);
    CHECK_FALSE(lim::consumer_map::load(write_file("bad.txt", text), error));
    CHECK(error.find(want) != std::string::npos);
  }
  CHECK_FALSE(lim::consumer_map::load("/nonexistent/consumers.txt", error));
  CHECK(error.find("cannot open") != std::string::npos);
}

TEST_CASE("the plan of a request: named, unknown, missing, unlimited, refused", "[plans]") {
  auto r = load(kPlanned);
  REQUIRE(r.ok());
  const auto& route = r.cfg->routes[0];
  const auto& l = route.limits[0];
  std::string scratch;
  auto plan = [&](header_map h) { return lim::pick_plan(l, parts(h), nullptr, scratch); };
  CHECK(plan({{"X-Plan", "gold"}}).plan->plan == "gold");
  CHECK(plan({{"X-Plan", "platinum"}}).plan->plan == "default");
  CHECK(plan({}).plan->plan == "default");
  CHECK(plan({{"X-Plan", "partner"}}).plan->unlimited);

  std::vector<lim::check> checks;
  header_map h{{"X-Api-Key", "k1"}, {"X-Plan", "gold"}};
  CHECK(lim::build_checks(checks, "fg:", route, parts(h)) == 0);
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].cfg->plan == "gold");
  CHECK(checks[0].key == "fg:{r:per-key:k1}");  // the limit's key, whatever the plan
  h["X-Plan"] = "partner";
  CHECK(lim::build_checks(checks, "fg:", route, parts(h)) == 0);
  CHECK(checks.empty());  // unlimited: not checked

  // Consumers, the unknown refused.
  const auto file = write_file("consumers.txt", sha256_hex("k-gold") + " gold\n");
  auto rc = load("      - name: per-key\n        algorithm: fixed_window\n        key: header:X-Api-Key\n"
                 "        limit: 3\n        window: 1h\n        plans:\n          consumers: " + file + "\n"
                 "          unknown: reject\n          gold: { limit: 5 }\n");
  INFO(errors(rc));
  REQUIRE(rc.ok());
  std::vector<std::string> errs;
  auto maps = lim::consumer_maps::read(*rc.cfg, errs);
  REQUIRE(maps);
  const auto& croute = rc.cfg->routes[0];
  CHECK(lim::build_checks(checks, "fg:", croute, parts({{"X-Api-Key", "k-gold"}}), false, &*maps) == 0);
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].cfg->plan == "gold");
  CHECK(lim::build_checks(checks, "fg:", croute, parts({{"X-Api-Key", "k-other"}}), false, &*maps) == 403);
  CHECK(lim::build_checks(checks, "fg:", croute, parts({}), false, &*maps) == 401);

  // A file naming a plan its limit lacks fails the load.
  write_file("consumers.txt", sha256_hex("k-gold") + " platinum\n");
  errs.clear();
  CHECK_FALSE(lim::consumer_maps::read(*rc.cfg, errs));
  REQUIRE(errs.size() == 1);
  CHECK(errs[0].find(":1: plan 'platinum' is not a plan of limit per-key (route r)") != std::string::npos);
}

TEST_CASE("a denial's body: problem details, text, or the route's template", "[plans]") {
  auto r = load(kPlanned);
  REQUIRE(r.ok());
  auto route = r.cfg->routes[0];
  const auto& gold = route.limits[0].plans[0];
  std::vector<lim::check> checks{{&gold, "k", 1}};
  std::vector<lim::decision> decisions{{false, 5, 0, 3'600'000, 2'500}};
  std::string body;
  lim::append_denial_body(body, route, checks, decisions);
  CHECK(body ==
        R"({"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be )"
        R"(satisfied as assigned quota has been exceeded","status":429,"detail":"limit per-key of route r: retry in 3 )"
        R"(s","violated-policies":["per-key"],"limit":"per-key","plan":"gold","retry_after":3})");
  CHECK(lim::content_type(route.response) == "application/problem+json");
  route.response.format = cfg::body_format::text;
  body.clear();
  lim::append_denial_body(body, route, checks, decisions);
  CHECK(body == "Too Many Requests: limit per-key of route r, retry in 3 s\n");
  route.response.format = cfg::body_format::custom;
  route.response.body = R"({"limit":"{limit}","plan":"{plan}","wait":{retry_after},"x":"{other}"})";
  body.clear();
  lim::append_denial_body(body, route, checks, decisions);
  CHECK(body == R"({"limit":"per-key","plan":"gold","wait":3,"x":"{other}"})");
  CHECK(lim::content_type(route.response) == "application/json");
  body.clear();
  route.response.format = cfg::body_format::problem;
  lim::append_unavailable_body(body, route);
  CHECK(body.find("temporary-reduced-capacity") != std::string::npos);
  CHECK(body.find(R"("status":503)") != std::string::npos);

  std::string headers;
  lim::append_rate_headers(headers, cfg::headers_mode::ietf, checks, decisions, true);
  CHECK(headers.find(R"(RateLimit-Policy: "per-key";q=5;w=3600;plan="gold")") != std::string::npos);
}

TEST_CASE("a route whose checks follow the client alone: address or global keys, fixed costs, no plans",
          "[plans]") {
  auto follows = [](const std::string& limits) {
    auto rc = load(limits);
    INFO(errors(rc));
    REQUIRE(rc.ok());
    return lim::checks_follow_client(rc.cfg->routes[0]);
  };
  const std::string window = ", limit: 3, window: 1h}\n";
  CHECK(follows("      - {name: a, algorithm: fixed_window, key: ip" + window +
                "      - {name: b, algorithm: sliding_window, key: global" + window +
                "      - {name: c, algorithm: fixed_window, key: [ip, global], cost: 2" + window));
  // Anything else the request says, or a number it carries, makes the checks its own.
  CHECK_FALSE(follows("      - {name: a, algorithm: fixed_window, key: ip" + window +
                      "      - {name: b, algorithm: fixed_window, key: \"header:X-Key\"" + window));
  CHECK_FALSE(follows("      - {name: a, algorithm: fixed_window, key: [ip, \"query:k\"]" + window));
  CHECK_FALSE(follows("      - {name: a, algorithm: fixed_window, key: ip, cost: \"header:X-Cost\"" + window));
  CHECK_FALSE(follows("      - {name: a, algorithm: fixed_window, key: ip, cost: body_bytes" + window));
  CHECK_FALSE(follows(kPlanned));

  // Such checks are what build_checks makes for any request of that client.
  auto rc = load("      - {name: a, algorithm: fixed_window, key: ip" + window);
  REQUIRE(rc.ok());
  std::vector<lim::check> one, other;
  header_map h1{{"X-Key", "k1"}}, h2{{"X-Key", "k2"}, {"X-Cost", "7"}};
  auto p1 = parts(h1), p2 = parts(h2);
  p1.client = p2.client = "192.0.2.1";
  p2.query = "k=v";
  CHECK(lim::build_checks(one, "fg:", rc.cfg->routes[0], p1) == 0);
  CHECK(lim::build_checks(other, "fg:", rc.cfg->routes[0], p2) == 0);
  REQUIRE(one.size() == 1);
  REQUIRE(other.size() == 1);
  CHECK(one[0].key == other[0].key);
  CHECK(one[0].cfg == other[0].cfg);
  CHECK(one[0].cost == other[0].cost);
}
