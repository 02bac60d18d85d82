#include <spdlog/spdlog.h>

#include <algorithm>

#include "app/server.hpp"
#include "fg_version.hpp"
#include "obs/span_export.hpp"
#include "store/cluster_batcher.hpp"
#include "redis/cluster.hpp"
#include "redis/sentinel.hpp"

// What the admin listener reads of the server: readiness, metrics, the cluster's masters.
namespace fg::app {

std::vector<std::pair<std::string, std::size_t>> server::cluster_masters() const {
  std::vector<std::pair<std::string, std::size_t>> out;
  for (const auto& w : workers_)
    for (const auto& [node, up] : w->cluster_masters()) {
      auto it = std::find_if(out.begin(), out.end(), [&](const auto& x) { return x.first == node; });
      if (it == out.end()) it = out.insert(out.end(), {node, 0});
      it->second += up;
    }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// The routes that answer 503 when the store fails (on_store_error: deny with a limit).
std::vector<std::string> denying_routes(const config::config& cfg) {
  std::vector<std::string> out;
  for (const auto& r : cfg.routes)
    if (r.store_error == config::on_store_error::deny && !r.limits.empty()) out.push_back(r.name);
  return out;
}

std::string joined(const std::vector<std::string>& v, std::size_t at_most = 5) {
  std::string out;
  for (std::size_t i = 0; i < v.size() && i < at_most; ++i) out += (i ? ", " : "") + v[i];
  if (v.size() > at_most) out += fmt::format(" and {} more", v.size() - at_most);
  return out;
}

}  // namespace

// Ready = this instance can serve its routes under their policies. A store outage alone
// does not make it unready where every route may allow or go local (a shared store's
// outage would otherwise take every instance out of service at once), unless a route
// denies on a store error or admin.ready_requires_store says so.
admin::readiness server::ready() const {
  admin::readiness out;
  auto cfg = current_config();
  if (!cfg) return {false, "no configuration loaded", {{"config", false, true, "no configuration loaded"}}};
  out.checks.push_back({"config", true, true, fmt::format("{} (hash {})", cfg->source, cfg->hash)});
  const bool serving = serving_.load();
  out.checks.push_back({"startup", serving, true,
                        serving ? "the proxy port listens" : "starting: waiting for the store (redis.startup_wait)"});
  if (cfg->store != config::store_kind::redis) {
    out.checks.push_back({"store", true, true, "memory"});
  } else {
    std::size_t down = 0;
    for (const auto& w : workers_) down += w->store_usable() ? 0 : 1;
    const bool up = down == 0 && !workers_.empty();
    std::string detail = up ? fmt::format("redis connected on {} of {} workers", workers_.size(), workers_.size())
                            : fmt::format("redis unreachable on {} of {} workers", down, workers_.size());
    if (!up && cfg->redis.mode == config::redis_mode::cluster) {
      // Which masters, or that no complete slot map is known yet.
      std::string why;
      for (const auto& [node, n] : cluster_masters())
        if (n < workers_.size())
          why += fmt::format("{}master {} unreachable on {} of {} workers", why.empty() ? "" : "; ", node,
                             workers_.size() - n, workers_.size());
      detail = why.empty() ? fmt::format("redis cluster: no complete slot map on {} of {} workers", down, workers_.size())
                           : why;
    }
    const auto denying = denying_routes(*cfg);
    const bool required = cfg->admin.ready_requires_store || !denying.empty();
    if (!up) {
      if (cfg->admin.ready_requires_store) detail += " (admin.ready_requires_store)";
      else if (!denying.empty()) detail += "; route(s) " + joined(denying) + " answer 503 on a store error (on_store_error: deny)";
      else detail += "; every route serves under on_store_error (allow or local)";
    }
    out.checks.push_back({"store", up, required, std::move(detail)});
  }
  out.ready = true;
  for (const auto& c : out.checks)
    if (!c.ok && c.required) {
      out.ready = false;
      out.reason += (out.reason.empty() ? "" : "; ") + c.detail;
    }
  return out;
}

std::shared_ptr<const upstream::server_set> server::upstream_servers() const {
  auto rt = current();
  return rt ? rt->servers : nullptr;
}

std::string server::metrics() const {
  std::vector<const obs::worker_metrics*> shards;
  for (const auto& w : workers_) shards.push_back(&w->metrics());
  obs::process_gauges g;
  g.open_connections = connections_.open.load(std::memory_order_relaxed);
  for (const auto& w : workers_) g.pooled_connections += w->pooled_connections();
  g.reloads_ok = reloads_ok_.load(std::memory_order_relaxed);
  g.reloads_failed = reloads_failed_.load(std::memory_order_relaxed);
  const auto cfg = current_config();
  g.span_export = cfg->tracing.exporter.on();
  g.spans_exported = obs::span_events::exported.load(std::memory_order_relaxed);
  g.spans_dropped_queue_full = obs::span_events::dropped_queue_full.load(std::memory_order_relaxed);
  g.spans_dropped_export_failed = obs::span_events::dropped_export_failed.load(std::memory_order_relaxed);
  g.redis = cfg->store == config::store_kind::redis;
  g.redis_stalled = redis::connection_events::stalled.load(std::memory_order_relaxed);
  g.redis_connect_timeouts = redis::connection_events::connect_timeouts.load(std::memory_order_relaxed);
  g.sentinel = cfg->store == config::store_kind::redis && cfg->redis.mode == config::redis_mode::sentinel;
  g.sentinel_master_changes = redis::sentinel_events::master_changes.load(std::memory_order_relaxed);
  g.sentinel_not_master = redis::sentinel_events::not_master.load(std::memory_order_relaxed);
  g.sentinel_switch_master = redis::sentinel_events::switch_master.load(std::memory_order_relaxed);
  g.cluster = cfg->store == config::store_kind::redis && cfg->redis.mode == config::redis_mode::cluster;
  if (g.cluster) {
    using ev = redis::cluster_events;
    const auto read = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    g.cluster_events = {{"moved", read(ev::moved)},           {"ask", read(ev::ask)},
                        {"refresh", read(ev::refreshes)},     {"refresh_failed", read(ev::refresh_failed)},
                        {"try_again", read(ev::try_again)},   {"cluster_down", read(ev::cluster_down)},
                        {"foreign_redirect", read(ev::foreign_redirect)},
                        {"refund", read(store::cluster_batcher::refunds)},
                        {"split", read(store::cluster_batcher::splits)}};
    g.cluster_nodes = cluster_masters();
    g.workers = workers_.size();
  }
  if (auto set = upstream_servers()) {
    const auto now = std::chrono::steady_clock::now();
    for (const auto& u : set->all())
      for (const auto& s : u.servers) {
        const auto& h = *s.health;
        const auto read = [](const auto& a) { return a.load(std::memory_order_relaxed); };
        g.upstream_servers.push_back({u.name, s.address, read(h.requests), read(h.failures), read(h.ejections),
                                      read(h.retries), read(h.active), h.in_service(now)});
      }
  }
  g.version = FG_VERSION;
  return obs::render_metrics(*current_config(), shards, g);
}

}  // namespace fg::app
