#include "admin/routes.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>
#include <boost/url/parse.hpp>

#include <array>

#include "admin/config_json.hpp"
#include "admin/limits.hpp"
#include "admin/upstreams_view.hpp"
#include "util/asio.hpp"

namespace fg::admin {

namespace json = boost::json;

reply json_reply(unsigned status, const json::object& o) { return {status, json::serialize(o), "application/json", {}}; }

namespace {

using boost::urls::url_view;

reply healthz(status_source&, url_view) { return json_reply(200, {{"status", "alive"}}); }

// ?verbose (any value) lists every check, failing or not.
reply readyz(status_source& status, url_view url) {
  auto r = status.ready();
  json::object o{{"status", r.ready ? "ready" : "not ready"}};
  if (!r.ready) o["reason"] = r.reason;
  if (url.params().contains("verbose")) {
    json::array checks;
    for (const auto& c : r.checks)
      checks.push_back(json::object{{"name", c.name}, {"ok", c.ok}, {"required", c.required}, {"detail", c.detail}});
    o["checks"] = std::move(checks);
  }
  return json_reply(r.ready ? 200 : 503, o);
}

reply effective_config(status_source& status, url_view) {
  auto cfg = status.current_config();
  if (!cfg) return json_reply(503, {{"error", "no configuration loaded"}});
  return json_reply(200, config_to_json(*cfg));
}

reply upstreams_view(status_source& status, url_view) {
  auto set = status.upstream_servers();
  if (!set) return json_reply(503, {{"error", "no configuration loaded"}});
  return json_reply(200, upstreams_to_json(*set, std::chrono::steady_clock::now()));
}

// Prometheus text exposition format 0.0.4.
reply metrics(status_source& status, url_view) {
  return {200, status.metrics(), "text/plain; version=0.0.4; charset=utf-8", {}};
}

reply reload_reply(const reload_outcome& r) {
  if (!r.ok) {
    json::array errors;
    for (auto& e : r.errors) errors.emplace_back(e);
    return json_reply(422, {{"status", "rejected"}, {"errors", std::move(errors)}});
  }
  json::array restart;
  for (auto& s : r.restart_needed) restart.emplace_back(s);
  return json_reply(200, {{"status", "reloaded"}, {"hash", r.hash}, {"restart_needed", std::move(restart)}});
}

// Loads the configuration file again (the same checks as at the start; a bad file
// leaves the old configuration serving and is answered 422 with its errors), on the
// server's reload thread: this one goes on answering probes meanwhile.
asio::awaitable<reply> reload(status_source& status, const services&, url_view) {
  auto ex = co_await asio::this_coro::executor;
  auto init = [&status, ex](auto handler) {
    auto h = std::make_shared<decltype(handler)>(std::move(handler));
    status.reload([h, ex](reload_outcome r) {
      asio::post(ex, [h, r = std::move(r)]() mutable { (*h)(std::move(r)); });
    });
  };
  auto outcome = co_await asio::async_initiate<decltype(asio::use_awaitable), void(reload_outcome)>(init, asio::use_awaitable);
  co_return reload_reply(outcome);
}

struct endpoint {
  std::string_view path;
  // The methods it takes, as the Allow header lists them; HEAD wherever GET is.
  std::string_view allow;
  reply (*handle)(status_source&, url_view);
  // Instead of handle: answered asynchronously, by serve().
  asio::awaitable<reply> (*handle_async)(status_source&, const services&, url_view) = nullptr;
};

asio::awaitable<reply> inspect_limits(status_source& status, const services& with, url_view url) {
  return limits(status, with.inspector, url);
}

asio::awaitable<reply> reset_limits(status_source& status, const services& with, url_view url) {
  return reset(status, with.inspector, url);
}

asio::awaitable<reply> grant_limits(status_source& status, const services& with, url_view url) {
  return grant(status, with.inspector, url);
}

constexpr std::array<endpoint, 9> endpoints{{
    {"/healthz", "GET, HEAD", &healthz},
    {"/readyz", "GET, HEAD", &readyz},
    {"/config", "GET, HEAD", &effective_config},
    {"/metrics", "GET, HEAD", &metrics},
    {"/upstreams", "GET, HEAD", &upstreams_view},
    {"/reload", "POST", nullptr, &reload},
    {"/limits", "GET, HEAD", nullptr, &inspect_limits},
    {"/limits/reset", "POST", nullptr, &reset_limits},
    {"/limits/grant", "POST", nullptr, &grant_limits},
}};

bool allowed(std::string_view allow, std::string_view method) {
  while (!allow.empty()) {
    auto comma = allow.find(',');
    auto item = allow.substr(0, comma);
    if (item == method) return true;
    if (comma == std::string_view::npos) break;
    allow.remove_prefix(comma + 1);
    while (!allow.empty() && allow.front() == ' ') allow.remove_prefix(1);
  }
  return false;
}

// The endpoint for the request, or the reply that says why there is none.
const endpoint* route(std::string_view method, boost::urls::url_view url, reply& refused) {
  const auto path = url.encoded_path();
  for (const auto& e : endpoints) {
    if (path != e.path) continue;
    if (!allowed(e.allow, method)) {
      refused = json_reply(405, {{"error", "method not allowed"}});
      refused.allow = e.allow;
      return nullptr;
    }
    return &e;
  }
  refused = json_reply(404, {{"error", "not found"}});
  return nullptr;
}

}  // namespace

reply dispatch(std::string_view method, std::string_view target, status_source& status) {
  auto url = boost::urls::parse_origin_form(target);
  if (!url) return json_reply(400, {{"error", "bad request target"}});
  reply refused;
  const auto* e = route(method, *url, refused);
  if (!e) return refused;
  if (!e->handle) return json_reply(503, {{"error", "asynchronous path"}});
  return e->handle(status, *url);
}

boost::asio::awaitable<reply> serve(std::string_view method, std::string_view target, status_source& status,
                                    const services& with) {
  auto url = boost::urls::parse_origin_form(target);
  if (!url) co_return json_reply(400, {{"error", "bad request target"}});
  reply refused;
  const auto* e = route(method, *url, refused);
  if (!e) co_return refused;
  if (!e->handle_async) co_return e->handle(status, *url);
  co_return co_await e->handle_async(status, with, *url);
}

}  // namespace fg::admin
