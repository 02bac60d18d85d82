#include "admin/config_json.hpp"

#include <boost/json/array.hpp>

namespace fg::admin {

namespace json = boost::json;

namespace {

std::int64_t ms(config::duration d) { return d.count(); }

json::array strings(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}

const char* name(config::on_store_error e) {
  switch (e) {
    case config::on_store_error::allow: return "allow";
    case config::on_store_error::deny: return "deny";
    case config::on_store_error::local: return "local";
  }
  return "?";
}

const char* name(config::headers_mode h) {
  switch (h) {
    case config::headers_mode::ietf: return "ietf";
    case config::headers_mode::legacy: return "legacy";
    case config::headers_mode::both: return "both";
    case config::headers_mode::none: return "none";
  }
  return "?";
}

const char* name(config::redis_mode m) {
  switch (m) {
    case config::redis_mode::standalone: return "standalone";
    case config::redis_mode::cluster: return "cluster";
    case config::redis_mode::sentinel: return "sentinel";
  }
  return "?";
}

json::object redis_json(const config::redis_config& r) {
  json::array addresses;
  for (const auto& a : r.addresses) addresses.emplace_back(a.str());
  return {{"mode", name(r.mode)},
          {"addresses", std::move(addresses)},
          {"master_name", r.master_name},
          {"username", r.username},
          {"password", r.password.empty() ? "" : redacted},
          {"sentinel_username", r.sentinel_username},
          {"sentinel_password", r.sentinel_password.empty() ? "" : redacted},
          {"database", r.database},
          {"timeout_ms", ms(r.timeout)},
          {"key_prefix", r.key_prefix}};
}

json::object client_ip_json(const config::client_ip_config& c) {
  const bool full = c.forward_chain == config::client_ip_config::chain::full;
  return {{"trusted_proxies", strings(c.trusted_proxies)},
          {"headers", strings(c.headers)},
          {"ipv6_prefix", c.ipv6_prefix},
          {"forward", c.forward},
          {"forward_chain", full ? "full" : "from_client"}};
}

json::object http_json(const config::http_config& h) {
  return {{"max_header_bytes", h.max_header_bytes}, {"max_body_bytes", h.max_body_bytes},
          {"header_timeout_ms", ms(h.header_timeout)}, {"idle_timeout_ms", ms(h.idle_timeout)},
          {"drain_timeout_ms", ms(h.drain_timeout)},   {"max_connections", h.max_connections}};
}

json::object resolver_json(const config::resolver_config& r) {
  json::array servers;
  for (const auto& s : r.servers) servers.emplace_back(s.str());
  return {{"servers", std::move(servers)}, {"timeout_ms", ms(r.timeout)}, {"tries", r.tries},
          {"refresh_ms", ms(r.refresh)}};
}

json::object limit_json(const config::limit_config& l) {
  json::array key;
  for (const auto& k : l.key) key.emplace_back(key_text(k));
  json::object o{{"name", l.name},
                 {"algorithm", algorithm_name(l.algo)},
                 {"key", std::move(key)},
                 {"cost", l.cost},
                 {"shadow", l.shadow},
                 {"on_missing_key", l.missing_key == config::on_missing_key::skip ? "skip" : "anonymous"}};
  if (config::rate_based(l)) {
    o["rate"] = json::object{{"count", l.rate_.count}, {"per_ms", ms(l.rate_.per)}};
    o["burst"] = l.burst;
  } else {
    o["limit"] = l.limit;
    o["window_ms"] = ms(l.window);
  }
  using kind = config::limit_config::cost_kind;
  if (l.cost_from == kind::header) o["cost"] = "header:" + l.cost_header;
  if (l.cost_from == kind::body_bytes) o["cost"] = "body_bytes";
  if (!l.charge_header.empty()) o["charge"] = "response_header:" + l.charge_header;
  if (l.calendar != config::limit_config::period::none) {
    using p = config::limit_config::period;
    o["align"] = "calendar";
    o["period"] = l.calendar == p::day ? "day" : l.calendar == p::week ? "week" : "month";
    o["timezone"] = l.timezone;
  }
  if (l.choice.how != config::plan_choice::by::none) {
    json::object plans;
    if (l.choice.how == config::plan_choice::by::source) plans["from"] = key_text(l.choice.from);
    else plans["consumers"] = l.choice.consumers, plans["consumer_key"] = key_text(l.choice.consumer_key);
    plans["unknown"] = l.choice.reject_unknown ? "reject" : "default";
    for (const auto& p : l.plans) {
      if (p.unlimited) plans[p.plan] = "unlimited";
      else if (config::rate_based(p))
        plans[p.plan] = json::object{{"rate", json::object{{"count", p.rate_.count}, {"per_ms", ms(p.rate_.per)}}},
                                     {"burst", p.burst}};
      else plans[p.plan] = json::object{{"limit", p.limit}, {"window_ms", ms(p.window)}};
    }
    o["plans"] = std::move(plans);
  }
  return o;
}

json::object route_json(const config::route_config& r) {
  json::object match;
  if (!r.match.path.empty()) match["path"] = r.match.path;
  if (!r.match.path_prefix.empty()) match["path_prefix"] = r.match.path_prefix;
  if (!r.match.methods.empty()) match["methods"] = strings(r.match.methods);
  if (!r.match.host.empty()) match["host"] = r.match.host;
  json::array limits;
  for (const auto& l : r.limits) limits.emplace_back(limit_json(l));
  return {{"name", r.name},
          {"match", std::move(match)},
          {"upstream", r.upstream},
          {"on_store_error", name(r.store_error)},
          {"response", json::object{{"status", r.response.status},
                                    {"format", r.response.format == config::body_format::problem ? "problem"
                                               : r.response.format == config::body_format::text ? "text"
                                                                                                : "custom"},
                                    {"content_type", r.response.content_type},
                                    {"body", r.response.body},
                                    {"headers", name(r.response.headers)}}},
          {"limits", std::move(limits)}};
}

}  // namespace

const char* algorithm_name(config::algorithm a) {
  switch (a) {
    case config::algorithm::fixed_window: return "fixed_window";
    case config::algorithm::sliding_log: return "sliding_log";
    case config::algorithm::sliding_window: return "sliding_window";
    case config::algorithm::token_bucket: return "token_bucket";
    case config::algorithm::gcra: return "gcra";
    case config::algorithm::concurrency: return "concurrency";
  }
  return "?";
}

const char* balance_name(config::balance b) {
  switch (b) {
    case config::balance::least_conn: return "least_conn";
    case config::balance::hash: return "hash";
    case config::balance::round_robin: break;
  }
  return "round_robin";
}

std::string key_text(const config::key_source& k) {
  using kind = config::key_source::kind;
  switch (k.type) {
    case kind::global: return "global";
    case kind::ip: return "ip";
    case kind::header: return "header:" + k.name;
    case kind::query: return "query:" + k.name;
    case kind::cookie: return "cookie:" + k.name;
    case kind::client_cert: return "client_cert";
  }
  return "?";
}

namespace {

json::object upstream_json(const config::upstream_config& u) {
  json::array servers;
  for (const auto& s : u.servers) servers.emplace_back(json::object{{"address", s.address.str()}, {"weight", s.weight}});
  json::array statuses;
  for (auto s : u.eject.statuses) statuses.emplace_back(s);
  json::object out{{"servers", std::move(servers)},
                   {"balance", balance_name(u.balance)},
                   {"eject", json::object{{"failures", u.eject.failures},
                                          {"base_time_ms", ms(u.eject.base_time)},
                                          {"max_time_ms", ms(u.eject.max_time)},
                                          {"max_share", u.eject.max_share},
                                          {"statuses", std::move(statuses)}}},
                   {"retries", u.retries},
                   {"retry_budget", json::object{{"share", u.budget.share}, {"min", u.budget.min}}},
                   {"connect_timeout_ms", ms(u.connect_timeout)},
                   {"response_timeout_ms", ms(u.response_timeout)},
                   {"max_idle", u.max_idle},
                   {"idle_timeout_ms", ms(u.idle_timeout)}};
  // The one-server form, as it was written.
  if (u.servers.size() == 1) out["address"] = u.servers.front().address.str();
  if (u.balance == config::balance::hash) out["hash_key"] = key_text(u.hash_key);
  return out;
}

}  // namespace

json::object config_to_json(const config::config& cfg) {
  json::object admin;
  if (cfg.admin.listen) admin["listen"] = cfg.admin.listen->str();
  json::object upstreams;
  for (const auto& u : cfg.upstreams) upstreams[u.name] = upstream_json(u);
  json::array routes;
  for (const auto& r : cfg.routes) routes.emplace_back(route_json(r));
  const bool json_log = cfg.log.format == config::log_format::json;
  return {{"source", cfg.source},
          {"listen", cfg.listen.str()},
          {"workers", cfg.workers},
          {"admin", std::move(admin)},
          {"log", json::object{{"level", cfg.log.level},
                               {"access_log", cfg.log.access_log},
                               {"format", json_log ? "json" : "text"}}},
          {"store", cfg.store == config::store_kind::redis ? "redis" : "memory"},
          {"memory", json::object{{"max_keys", cfg.memory.max_keys}}},
          {"redis", redis_json(cfg.redis)},
          {"client_ip", client_ip_json(cfg.client_ip)},
          {"http", http_json(cfg.http)},
          {"resolver", resolver_json(cfg.resolver)},
          {"upstreams", std::move(upstreams)},
          {"routes", std::move(routes)}};
}

}  // namespace fg::admin
