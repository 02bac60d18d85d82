// Tests for admin/: the route table's answers (status, type, Allow) over a fake status
// source, and /config's JSON (every section present, the Redis password never in it).
#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <string>

#include "admin/config_json.hpp"
#include "admin/routes.hpp"
#include "config/loader.hpp"

namespace json = boost::json;
namespace cfg = fg::config;

namespace {

const std::string kConfig = R"(listen: "127.0.0.1:8081"
workers: 3
admin:
  listen: "127.0.0.1:9901"
store: redis
redis:
  addresses: ["10.0.0.1:6380"]
  username: gate
  password: "hunter2-secret"
  database: 2
  timeout: 75ms
upstreams:
  api:
    address: "127.0.0.1:9000"
routes:
  - name: r
    match:
      path_prefix: /api/
      methods: [GET]
    upstream: api
    on_store_error: deny
    limits:
      - name: per-ip
        algorithm: token_bucket
        key: [ip, "header:X-Key"]
        rate: 10/s
        burst: 20
        shadow: true
      - name: fw
        algorithm: fixed_window
        key: global
        limit: 5
        window: 1m
)";

cfg::snapshot load(const std::string& text) {
  auto r = cfg::load_string(text, "test.yaml");
  for (const auto& e : r.errors) FAIL(e.str());
  return r.cfg;
}

struct fake_status final : fg::admin::status_source {
  cfg::snapshot cfg;
  fg::admin::readiness state{true, {}};
  cfg::snapshot current_config() const override { return cfg; }
  fg::admin::readiness ready() const override { return state; }
  std::string metrics() const override { return "# TYPE x counter\nx 1\n"; }
  fg::admin::reload_outcome next_reload{true, "abc", {}, {}};
  int reloads = 0;
  fg::admin::reload_outcome reload() override { return ++reloads, next_reload; }
};

}  // namespace

TEST_CASE("admin: /healthz, /readyz and their failure", "[admin]") {
  fake_status s;
  s.cfg = load(kConfig);
  auto h = fg::admin::dispatch("GET", "/healthz", s);
  CHECK(h.status == 200);
  CHECK(h.content_type == "application/json");
  CHECK(h.body == R"({"status":"alive"})");
  CHECK(fg::admin::dispatch("GET", "/readyz?verbose=1", s).body == R"({"status":"ready"})");
  s.state = {false, "redis unreachable on 1 of 4 workers"};
  auto r = fg::admin::dispatch("HEAD", "/readyz", s);
  CHECK(r.status == 503);
  CHECK(json::parse(r.body) == json::parse(R"({"status":"not ready","reason":"redis unreachable on 1 of 4 workers"})"));
}

TEST_CASE("admin: unknown paths are 404, other methods 405 with Allow", "[admin]") {
  fake_status s;
  s.cfg = load(kConfig);
  auto m = fg::admin::dispatch("GET", "/metrics", s);
  CHECK(m.status == 200);
  CHECK(m.content_type == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(m.body == "# TYPE x counter\nx 1\n");
  for (const char* path : {"/", "/limits/", "/reloadz", "/healthzz", "/config/"}) {
    auto r = fg::admin::dispatch("GET", path, s);
    CHECK(r.status == 404);
    CHECK(r.allow.empty());
  }
  for (const char* method : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS", "get"}) {
    auto r = fg::admin::dispatch(method, "/config", s);
    CHECK(r.status == 405);
    CHECK(r.allow == "GET, HEAD");
  }
  CHECK(fg::admin::dispatch("GET", "http://x/healthz", s).status == 400);
}

TEST_CASE("admin: POST /reload answers what the reload did", "[admin]") {
  fake_status s;
  s.cfg = load(kConfig);
  auto get = fg::admin::dispatch("GET", "/reload", s);
  CHECK(get.status == 405);
  CHECK(get.allow == "POST");
  CHECK(s.reloads == 0);
  s.next_reload.restart_needed = {"listen"};
  auto ok = fg::admin::dispatch("POST", "/reload", s);
  CHECK(s.reloads == 1);
  CHECK(ok.status == 200);
  CHECK(ok.body == R"({"status":"reloaded","hash":"abc","restart_needed":["listen"]})");
  s.next_reload = {false, {}, {"f.yaml:3:7: unknown key 'lmit'"}, {}};
  auto bad = fg::admin::dispatch("POST", "/reload", s);
  CHECK(bad.status == 422);
  CHECK(bad.body == R"({"status":"rejected","errors":["f.yaml:3:7: unknown key 'lmit'"]})");
}

TEST_CASE("admin: /config is the effective configuration, the password redacted", "[admin]") {
  fake_status s;
  s.cfg = load(kConfig);
  auto r = fg::admin::dispatch("GET", "/config", s);
  REQUIRE(r.status == 200);
  CHECK(r.body.find("hunter2") == std::string::npos);
  auto c = json::parse(r.body).as_object();
  CHECK(c.at("listen") == "127.0.0.1:8081");
  CHECK(c.at("workers") == 3);
  CHECK(c.at("admin").at("listen") == "127.0.0.1:9901");
  CHECK(c.at("store") == "redis");
  const auto& redis = c.at("redis");
  CHECK(redis.at("password") == fg::admin::redacted);
  CHECK(redis.at("username") == "gate");
  CHECK(redis.at("database") == 2);
  CHECK(redis.at("timeout_ms") == 75);
  CHECK(redis.at("addresses") == json::parse(R"(["10.0.0.1:6380"])"));
  CHECK(c.at("upstreams").at("api").at("address") == "127.0.0.1:9000");
  const auto& route = c.at("routes").at(0);
  CHECK(route.at("on_store_error") == "deny");
  CHECK(route.at("match") == json::parse(R"({"path_prefix":"/api/","methods":["GET"]})"));
  const auto& tb = route.at("limits").at(0);
  CHECK(tb.at("algorithm") == "token_bucket");
  CHECK(tb.at("key") == json::parse(R"(["ip","header:X-Key"])"));
  CHECK(tb.at("rate") == json::parse(R"({"count":10,"per_ms":1000})"));
  CHECK(tb.at("burst") == 20);
  CHECK(tb.at("shadow") == true);
  const auto& fw = route.at("limits").at(1);
  CHECK(fw.at("limit") == 5);
  CHECK(fw.at("window_ms") == 60000);
  CHECK(fw.at("shadow") == false);
}

TEST_CASE("admin: an empty password shows as empty", "[admin]") {
  auto c = load("upstreams:\n  api:\n    address: \"127.0.0.1:9000\"\n"
                "routes:\n  - name: r\n    match:\n      path_prefix: /\n    upstream: api\n");
  auto o = fg::admin::config_to_json(*c);
  CHECK(o.at("redis").at("password") == "");
  CHECK(o.at("admin").as_object().empty());
  CHECK(o.at("store") == "memory");
}
