// Tests for admin/: the route table's answers (status, type, Allow) over a fake status
// source, and /config's JSON (every section present, the Redis password never in it).
#include <catch2/catch.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <string>

#include "admin/access.hpp"
#include "admin/config_json.hpp"
#include "admin/routes.hpp"
#include "config/loader.hpp"
#include "admin_fakes.hpp"

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

using fg::test::fake_status;
using fg::test::load;
using fg::test::serve;

}  // namespace

TEST_CASE("admin: /healthz, /readyz and their failure", "[admin]") {
  fake_status s(load(kConfig));
  fg::test::expect_reply(fg::admin::dispatch("GET", "/healthz", s), 200, "application/json", R"({"status":"alive"})");
  CHECK(fg::admin::dispatch("GET", "/readyz", s).body == R"({"status":"ready"})");
  s.state.checks = {{"store", false, false, "redis unreachable on 1 of 4 workers"}};
  CHECK(fg::admin::dispatch("GET", "/readyz?verbose=1", s).body ==
        R"({"status":"ready","checks":[{"name":"store","ok":false,"required":false,)"
        R"("detail":"redis unreachable on 1 of 4 workers"}]})");
  s.state = {false, "redis unreachable on 1 of 4 workers", {}};
  auto r = fg::admin::dispatch("HEAD", "/readyz", s);
  CHECK(r.status == 503);
  CHECK(json::parse(r.body) == json::parse(R"({"status":"not ready","reason":"redis unreachable on 1 of 4 workers"})"));
}

TEST_CASE("admin: unknown paths are 404, other methods 405 with Allow", "[admin]") {
  fake_status s(load(kConfig));
  fg::test::expect_reply(fg::admin::dispatch("GET", "/metrics", s), 200, "text/plain; version=0.0.4; charset=utf-8",
                         "# TYPE x counter\nx 1\n");
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
  fake_status s(load(kConfig));
  auto get = fg::admin::dispatch("GET", "/reload", s);
  CHECK(get.status == 405);
  CHECK(get.allow == "POST");
  CHECK(s.reloads == 0);
  s.next_reload.restart_needed = {"listen"};
  auto ok = serve("POST", "/reload", s);
  CHECK(s.reloads == 1);
  CHECK(ok.status == 200);
  CHECK(ok.body == R"({"status":"reloaded","hash":"abc","restart_needed":["listen"]})");
  s.next_reload = {false, {}, {"f.yaml:3:7: unknown key 'lmit'"}, {}};
  auto bad = serve("POST", "/reload", s);
  CHECK(bad.status == 422);
  CHECK(bad.body == R"({"status":"rejected","errors":["f.yaml:3:7: unknown key 'lmit'"]})");
}

TEST_CASE("admin: /config is the effective configuration, the password redacted", "[admin]") {
  fake_status s(load(kConfig));
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

// ---------------------------------------------------------------- who may call what

namespace {

fg::config::admin_config admin_at(const char* host, std::string token = {}) {
  fg::config::admin_config a;
  a.listen = fg::config::endpoint{host, 9901};
  a.token = std::move(token);
  a.hosts = {"gw.internal"};
  return a;
}

fg::admin::request_facts facts(std::string_view method, std::string_view path, std::optional<std::string_view> host,
                               std::optional<std::string_view> auth = {}) {
  fg::admin::request_facts f;
  f.method = method;
  f.path = path;
  f.host = host;
  f.authorization = auth;
  return f;
}

unsigned refused(const fg::admin::request_facts& f, const fg::config::admin_config& a) {
  auto r = fg::admin::refuse(f, a);
  return r ? r->status : 0;
}

}  // namespace

TEST_CASE("admin access: a Host that is not the listener's is refused, probes excepted", "[admin][access]") {
  const auto a = admin_at("127.0.0.1");
  for (const char* ok : {"127.0.0.1:9901", "[::1]:9901", "10.1.2.3", "localhost:9901", "LOCALHOST.", "gw.internal:9901"})
    CHECK(refused(facts("GET", "/metrics", ok), a) == 0);
  for (const char* bad : {"evil.example:9901", "127.0.0.1.evil.example", "gw.internal.evil", ""})
    CHECK(refused(facts("GET", "/metrics", bad), a) == 403);
  // a kubelet probes by the pod's address, but a probe reveals nothing either way
  CHECK(refused(facts("GET", "/healthz", "evil.example"), a) == 0);
  CHECK(refused(facts("GET", "/readyz", "evil.example"), a) == 0);
  // the refusal echoes no byte of the Host that could break its JSON
  auto r = fg::admin::refuse(facts("GET", "/metrics", "a\"b<c>"), a);
  REQUIRE(r);
  const auto error = boost::json::parse(r->body).at("error").as_string();
  CHECK(std::string_view(error).find('"') == std::string_view::npos);
  CHECK(std::string_view(error).find('<') == std::string_view::npos);
}

TEST_CASE("admin access: with a token, privileged paths need it as a bearer credential", "[admin][access]") {
  const auto a = admin_at("0.0.0.0", "s3cret-token");
  for (const char* path : {"/config", "/limits", "/reload"}) {
    const char* method = std::string_view(path) == "/reload" ? "POST" : "GET";
    CHECK(refused(facts(method, path, "10.0.0.5:9901"), a) == 401);
    CHECK(refused(facts(method, path, "10.0.0.5:9901", "Bearer wrong"), a) == 401);
    CHECK(refused(facts(method, path, "10.0.0.5:9901", "Bearer s3cret-token-and-more"), a) == 401);
    CHECK(refused(facts(method, path, "10.0.0.5:9901", "Basic s3cret-token"), a) == 401);
    CHECK(refused(facts(method, path, "10.0.0.5:9901", "Bearer s3cret-token"), a) == 0);
    CHECK(refused(facts(method, path, "10.0.0.5:9901", "bearer s3cret-token"), a) == 0);
  }
  auto r = fg::admin::refuse(facts("GET", "/config", "10.0.0.5"), a);
  REQUIRE(r);
  CHECK(r->www_authenticate.find("Bearer") == 0);
  // the open paths stay open
  for (const char* path : {"/healthz", "/readyz", "/metrics"}) CHECK(refused(facts("GET", path, "10.0.0.5"), a) == 0);
}

TEST_CASE("admin access: a web page can neither read nor change the admin", "[admin][access]") {
  const auto a = admin_at("127.0.0.1");
  auto post = facts("POST", "/reload", "127.0.0.1:9901");
  CHECK(refused(post, a) == 403);  // a body-less POST a form could send
  post.has_admin_header = true;
  CHECK(refused(post, a) == 0);
  post.has_origin = true;  // a browser's request, even one allowed to add headers
  CHECK(refused(post, a) == 403);
  auto get = facts("GET", "/config", "127.0.0.1:9901");
  CHECK(refused(get, a) == 0);
  get.has_origin = true;
  CHECK(refused(get, a) == 403);
}

TEST_CASE("admin access: tokens compare by content only", "[admin][access]") {
  CHECK(fg::admin::same_token("abc", "abc"));
  CHECK_FALSE(fg::admin::same_token("abc", "abd"));
  CHECK_FALSE(fg::admin::same_token("ab", "abc"));
  CHECK_FALSE(fg::admin::same_token("", "abc"));
}

// ---------------------------------------------------------------- the /limits call budget

#include "admin/call_budget.hpp"

TEST_CASE("admin: /limits calls are budgeted in total and per peer", "[admin][budget]") {
  fg::config::admin_config a;
  a.limits_rate = {10, std::chrono::milliseconds(1000)};
  a.limits_rate_per_peer = {2, std::chrono::milliseconds(60000)};
  fg::admin::call_budget b;
  const auto t0 = fg::admin::call_budget::clock::now();
  CHECK(b.take("p", t0, a));
  CHECK(b.take("p", t0, a));
  CHECK_FALSE(b.take("p", t0, a));
  CHECK(b.wait_s() == 30);  // one call per 30 s for this peer
  CHECK(b.take("q", t0, a));  // another peer's own bucket
  CHECK(b.take("p", t0 + std::chrono::seconds(30), a));
  // the total: 10 a second whoever asks
  fg::admin::call_budget t;
  int admitted = 0;
  for (int i = 0; i < 50; ++i) admitted += t.take("peer" + std::to_string(i), t0, a);
  CHECK(admitted == 10);
  CHECK(t.wait_s() == 1);
  // the peer table stays bounded: past max_peers, new peers share one bucket
  fg::admin::call_budget many;
  a.limits_rate = {1000000, std::chrono::milliseconds(1000)};
  for (std::size_t i = 0; i < 3 * fg::admin::call_budget::max_peers; ++i) (void)many.take(std::to_string(i), t0, a);
  CHECK(many.peers() <= fg::admin::call_budget::max_peers);
}
