#include "admin/limits.hpp"

#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <optional>
#include <vector>

#include "admin/config_json.hpp"
#include "admin/limits_query.hpp"
#include "limit/rate_headers.hpp"
#include "store/inspector.hpp"
#include "limit/keys.hpp"
#include "util/text.hpp"

namespace fg::admin {

namespace json = boost::json;
using kind = config::key_source::kind;

namespace {

reply error(unsigned status, const std::string& message) { return json_reply(status, {{"error", message}}); }

const char* store_name(const config::config& cfg) {
  return cfg.store == config::store_kind::redis ? "redis" : "memory";
}

bool uses(const config::route_config& r, kind k) {
  return std::any_of(r.limits.begin(), r.limits.end(), [&](const auto& l) {
    return std::any_of(l.key.begin(), l.key.end(), [&](const auto& s) { return s.type == k; });
  });
}

// Whether one of the route's limits reads the parameter (header names case-insensitive).
bool reads(const config::route_config& r, kind k, const std::string& name) {
  return std::any_of(r.limits.begin(), r.limits.end(), [&](const auto& l) {
    return std::any_of(l.key.begin(), l.key.end(), [&](const auto& s) {
      if (k == kind::header)
        return (s.type == kind::header && util::iequals(s.name, name)) ||
               (s.type == kind::cookie && util::iequals(name, "Cookie"));
      return s.type == k && s.name == name;
    });
  });
}

// The parameters no limit of the route reads: named in the answer, a typo shows.
json::array unused(const config::route_config& r, const limits_query& q) {
  json::array out;
  if (q.ip && !uses(r, kind::ip)) out.emplace_back("ip");
  if (!q.client_cert.empty() && !uses(r, kind::client_cert)) out.emplace_back("client_cert");
  for (const auto& [n, v] : q.headers)
    if (!reads(r, kind::header, n)) out.emplace_back("header." + n);
  for (const auto& [n, v] : q.query)
    if (!reads(r, kind::query, n)) out.emplace_back("query." + n);
  for (const auto& [n, v] : q.cookies)
    if (!reads(r, kind::cookie, n)) out.emplace_back("cookie." + n);
  return out;
}

json::array missing_sources(const config::limit_config& l, const limit::request_parts& parts) {
  json::array out;
  for (const auto& k : l.key)
    if (source_missing(l, k, parts)) out.emplace_back(key_text(k));
  return out;
}

// What a limit is, as configured.
json::object describe(const config::limit_config& l) {
  json::array sources;
  for (const auto& k : l.key) sources.emplace_back(key_text(k));
  json::object o{{"name", l.name},
                 {"algorithm", algorithm_name(l.algo)},
                 {"key_source", std::move(sources)},
                 {"quota", config::quota(l)},
                 {"cost", l.cost},
                 {"shadow", l.shadow}};
  if (config::rate_based(l)) {
    o["rate"] = json::object{{"count", l.rate_.count}, {"per_ms", l.rate_.per.count()}};
    o["burst"] = l.burst;
  } else {
    o[l.algo == config::algorithm::concurrency ? "lease_ms" : "window_ms"] = l.window.count();
  }
  return o;
}

// One evaluated limit: its key and the store's answer for the next request.
void add_state(json::object& o, const limit::check& c, const limit::decision& d, bool admitted,
               const limit::request_parts& parts) {
  const auto& l = *c.cfg;
  const bool cc = l.algo == config::algorithm::concurrency;
  // What is left now: an admitting decision tells what is left after the request.
  const std::uint64_t taken = cc ? 1 : c.cost;
  const std::uint64_t now_left = std::min(config::quota(l), d.allowed ? d.remaining + taken : d.remaining);
  o["key"] = c.key;
  if (auto m = missing_sources(l, parts); !m.empty()) {
    o["anonymous"] = true;  // on_missing_key: anonymous, the key every such request shares
    o["missing"] = std::move(m);
  }
  o["remaining"] = now_left;
  if (cc) o["in_use"] = config::quota(l) - now_left;
  o["reset_ms"] = d.reset_ms;
  o["next"] = d.allowed ? "allowed" : l.shadow ? "shadow_denied" : "denied";
  o["would_deny"] = !d.allowed;
  if (!d.allowed) o["retry_after_ms"] = d.retry_ms;
  // A request that one limit denies consumes nothing from the others.
  o["consumes"] = d.allowed && admitted;
}

json::object answer(const config::config& cfg, const config::route_config& route, const limits_query& q,
                    const limit::request_parts& parts, const std::vector<limit::check>& checks,
                    const std::vector<limit::decision>& out, const limit::consumer_maps* consumers) {
  bool denied = false;
  std::int64_t retry = 0;
  for (std::size_t i = 0; i < checks.size(); ++i)
    if (!out[i].allowed && !checks[i].cfg->shadow) denied = true, retry = std::max(retry, out[i].retry_ms);
  json::array limits;
  std::string scratch;
  for (const auto& l : route.limits) {
    // A limit with plans: the plan this request is on, and its numbers.
    const auto* in_force = &l;
    if (l.choice.how != config::plan_choice::by::none) in_force = limit::pick_plan(l, parts, consumers, scratch).plan;
    auto o = describe(*in_force);
    if (in_force != &l) {
      o["plan"] = in_force->plan;
      if (in_force->unlimited) {
        o["unlimited"] = true;
        limits.emplace_back(std::move(o));
        continue;
      }
    }
    auto it = std::find_if(checks.begin(), checks.end(), [&](const auto& c) { return c.cfg == in_force; });
    if (it == checks.end()) {
      // on_missing_key: skip, and a source missing: the gateway does not evaluate it.
      o["skipped"] = true;
      o["missing"] = missing_sources(l, parts);
    } else {
      add_state(o, *it, out[static_cast<std::size_t>(it - checks.begin())], !denied, parts);
    }
    limits.emplace_back(std::move(o));
  }
  json::object a{{"route", route.name}, {"store", store_name(cfg)}, {"next_request", denied ? "denied" : "allowed"}};
  // As the 429's Retry-After would say.
  if (denied) a["retry_after_s"] = std::max<std::int64_t>(1, limit::ceil_seconds(retry));
  a["limits"] = std::move(limits);
  if (auto u = unused(route, q); !u.empty()) a["unused_parameters"] = std::move(u);
  return a;
}

const config::route_config* find_route(const config::config& cfg, const std::string& name) {
  for (const auto& r : cfg.routes)
    if (r.name == name) return &r;
  return nullptr;
}

// The first limit that keys on the client's address, if any.
const config::limit_config* keyed_on_ip(const config::route_config& r) {
  for (const auto& l : r.limits)
    for (const auto& k : l.key)
      if (k.type == kind::ip) return &l;
  return nullptr;
}

}  // namespace

// The client of a query's `ip`, or the reply that refuses the query.
std::optional<reply> client_of(const limits_query& q, const config::config& cfg, const config::route_config& route,
                               std::string& client) {
  if (q.ip) {
    auto key = client_key(*q.ip, cfg);
    if (!key) return error(400, "parameter 'ip': '" + *q.ip + "' is not an IP address");
    client = std::move(*key);
  } else if (const auto* l = keyed_on_ip(route)) {
    return error(400, "missing parameter 'ip': limit '" + l->name + "' keys on the client's address");
  }
  return std::nullopt;
}

// What a /limits query asks, built once for GET /limits and POST /limits/reset and /grant: the
// configuration in effect (at each call: a reload swaps it), the route, and the checks
// the gateway's own key building and plans make for a request with these attributes.
// Built in place (the synthetic request points into the query).
struct question {
  limits_query q;
  config::snapshot cfg;
  const config::route_config* route = nullptr;
  std::shared_ptr<const limit::consumer_maps> consumers;
  std::optional<synthetic_request> req;
  std::vector<limit::check> checks;
  unsigned refused = 0;  // a status the plans or a cost header refuse such a request with
};

std::optional<reply> ask(const status_source& status, boost::urls::url_view url, question& a) {
  if (auto bad = parse_limits_query(url, a.q)) return bad;
  a.cfg = status.current_config();
  if (!a.cfg) return error(503, "no configuration loaded");
  a.route = find_route(*a.cfg, a.q.route);
  if (!a.route) return error(404, "no route named '" + a.q.route + "'");
  std::string client;
  if (auto bad = client_of(a.q, *a.cfg, *a.route, client)) return bad;
  a.req.emplace(a.q, std::move(client));
  a.consumers = status.consumers();
  a.refused = limit::build_checks(a.checks, a.cfg->redis.key_prefix, *a.route, a.req->parts(),
                                  limit::cluster_keys(*a.cfg), a.consumers.get());
  return std::nullopt;
}

std::string_view refusal_text(unsigned status) {
  return status == 401   ? "refused: no consumer key (401)"
         : status == 403 ? "refused: unknown consumer (403)"
                         : "refused: a cost header that is no number (400)";
}

// The checks a reset or a grant acts on: those of the limit the query names, if it names
// one (404 when the route has no such limit).
std::optional<reply> chosen(question& a) {
  if (a.refused) return error(400, "such a request is " + std::string(refusal_text(a.refused)) + ": no limit to change");
  if (!a.q.limit) return std::nullopt;
  const auto& name = *a.q.limit;
  if (std::none_of(a.route->limits.begin(), a.route->limits.end(), [&](const auto& l) { return l.name == name; }))
    return error(404, "route '" + a.route->name + "' has no limit named '" + name + "'");
  std::erase_if(a.checks, [&](const limit::check& c) { return c.cfg->name != name; });
  return std::nullopt;
}

reply unreachable(const config::config& cfg, const boost::system::error_code& ec) {
  return json_reply(503, {{"error", "store unreachable"}, {"store", store_name(cfg)}, {"reason", ec.message()}});
}

boost::asio::awaitable<reply> reset(const status_source& status, store::inspector* inspector,
                                    boost::urls::url_view url) {
  question a;
  if (auto bad = ask(status, url, a)) co_return *bad;
  if (a.q.amount) co_return error(400, "parameter 'amount' is for POST /limits/grant");
  if (auto bad = chosen(a)) co_return *bad;
  if (!inspector) co_return error(503, "limit inspection is not available");
  if (auto ec = co_await inspector->reset(*a.cfg, a.checks)) co_return unreachable(*a.cfg, ec);
  json::array done;
  for (const auto& c : a.checks) done.emplace_back(c.cfg->name);
  spdlog::info("admin: the limits {} of route {} reset for one client", json::serialize(done), a.route->name);
  co_return json_reply(200, {{"route", a.route->name}, {"reset", std::move(done)}});
}

boost::asio::awaitable<reply> grant(const status_source& status, store::inspector* inspector,
                                    boost::urls::url_view url) {
  question a;
  if (auto bad = ask(status, url, a)) co_return *bad;
  if (!a.q.amount) co_return error(400, "missing parameter 'amount': how much to give back");
  if (auto bad = chosen(a)) co_return *bad;
  // The algorithms that count any cost give some back; a log's entries and a lease are
  // named, not counted: those are reset, or left to expire.
  json::array granted, not_granted;
  std::vector<limit::check> gives;
  for (const auto& c : a.checks) {
    if (config::takes_any_cost(*c.cfg)) {
      gives.push_back(c);
      gives.back().cost = *a.q.amount;
      granted.emplace_back(c.cfg->name);
    } else {
      not_granted.emplace_back(json::object{
          {"name", c.cfg->name}, {"why", std::string(algorithm_name(c.cfg->algo)) + " takes no grant: reset it"}});
    }
  }
  if (a.q.limit && !not_granted.empty())
    co_return error(400, "limit '" + *a.q.limit + "' takes no grant (" +
                             std::string(algorithm_name(a.checks.front().cfg->algo)) + "): use POST /limits/reset");
  if (!inspector) co_return error(503, "limit inspection is not available");
  if (!gives.empty())
    if (auto ec = co_await inspector->grant(*a.cfg, gives)) co_return unreachable(*a.cfg, ec);
  spdlog::info("admin: the limits {} of route {} gave {} back to one client", json::serialize(granted), a.route->name,
               *a.q.amount);
  json::object o{{"route", a.route->name}, {"amount", *a.q.amount}, {"granted", std::move(granted)}};
  if (!not_granted.empty()) o["not_granted"] = std::move(not_granted);
  co_return json_reply(200, o);
}

boost::asio::awaitable<reply> limits(const status_source& status, store::inspector* inspector,
                                     boost::urls::url_view url) {
  question a;
  if (auto bad = ask(status, url, a)) co_return *bad;
  if (a.q.limit || a.q.amount)
    co_return error(400, std::string("parameter '") + (a.q.limit ? "limit" : "amount") +
                             "' is for POST /limits/reset and /limits/grant");
  if (a.refused) co_return json_reply(200, json::object{{"route", a.route->name}, {"next_request", refusal_text(a.refused)}});
  const auto& cfg = a.cfg;
  const auto* route = a.route;
  const auto& checks = a.checks;
  const auto& req = *a.req;
  const auto& consumers = a.consumers;
  std::vector<limit::decision> out(checks.size());
  if (!inspector) co_return error(503, "limit inspection is not available");
  const std::span<const limit::check> in(checks);
  const std::span<limit::decision> into(out);
  auto ec = co_await inspector->peek(*cfg, in, into);
  if (ec) co_return unreachable(*cfg, ec);
  co_return json_reply(200, answer(*cfg, *route, a.q, req.parts(), checks, out, consumers.get()));
}

}  // namespace fg::admin
