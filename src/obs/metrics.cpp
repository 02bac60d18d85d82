#include "obs/metrics.hpp"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <utility>

namespace fg::obs {

std::size_t metrics_layout::slot_of(std::unordered_map<std::string, std::size_t>& names, std::string name) {
  if (auto it = names.find(name); it != names.end()) return it->second;
  if (names.size() >= max_slots) {
    if (!std::exchange(warned_, true))
      spdlog::warn("metrics: more than {} distinct route or limit names since the start: new ones are not counted "
                   "until a restart",
                   max_slots);
    return none;
  }
  return names.emplace(std::move(name), names.size()).first->second;
}

void metrics_layout::assign(config::config& cfg) {
  for (auto& r : cfg.routes) {
    r.slot = slot_of(routes_, r.name);
    // A limit's name is unique within its route; '\n' appears in neither name.
    for (auto& l : r.limits) {
      l.index = slot_of(limits_, r.name + '\n' + l.name);
      // Each plan counts apart (a plan is a bounded label: the configuration names them).
      for (auto& p : l.plans) p.index = slot_of(limits_, r.name + '\n' + l.name + '\n' + p.plan);
    }
  }
}

void worker_metrics::reserve(const config::config& cfg) {
  std::size_t routes = 0, limits = 0;
  for (const auto& r : cfg.routes) {
    if (r.slot != metrics_layout::none) routes = std::max(routes, r.slot + 1);
    for (const auto& l : r.limits) {
      if (l.index != metrics_layout::none) limits = std::max(limits, l.index + 1);
      for (const auto& p : l.plans)
        if (p.index != metrics_layout::none) limits = std::max(limits, p.index + 1);
    }
  }
  requests_.reserve(routes);
  grpc_.reserve(routes);
  upstream_.reserve(routes);
  decisions_.reserve(limits);
}

void worker_metrics::upstream_times(std::size_t slot, std::span<std::uint64_t, upstream_width> out) const {
  auto* r = upstream_.row(slot, std::memory_order_acquire);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = r ? read(r[i]) : 0;
}

void worker_metrics::store_times(std::span<std::uint64_t, store_bounds_us.size() + 2> out) const {
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = read(store_latency_[i]);
}

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

constexpr std::string_view class_names[5] = {"1xx", "2xx", "3xx", "4xx", "5xx"};

ClientMetric counter_of(std::vector<ClientMetric::Label> labels, std::uint64_t value) {
  ClientMetric m;
  m.label = std::move(labels);
  m.counter.value = static_cast<double>(value);
  return m;
}

ClientMetric gauge_of(std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  return m;
}

std::uint64_t sum(std::span<const worker_metrics* const> workers, const std::function<std::uint64_t(const worker_metrics&)>& f) {
  std::uint64_t total = 0;
  for (const auto* w : workers) total += f(*w);
  return total;
}

// Requests by route and status class; only the series that have counted something (a
// route never asked shows no line, which Prometheus reads as 0).
// `add(slot, route name)` for each route that has a metrics slot, then for "none" (the
// requests that matched no route).
template <class F>
void each_route_slot(const config::config& cfg, F add) {
  for (const auto& r : cfg.routes)
    if (r.slot != metrics_layout::none) add(r.slot, r.name);
  add(metrics_layout::none, std::string("none"));
}

MetricFamily requests(const config::config& cfg, std::span<const worker_metrics* const> workers) {
  MetricFamily f{"floodgate_requests_total", "Requests answered, by route and status class.", MetricType::Counter, {}};
  each_route_slot(cfg, [&](std::size_t slot, const std::string& route) {
    for (unsigned k = 0; k < 5; ++k) {
      auto n = sum(workers, [&](const worker_metrics& w) { return w.requests(slot, k); });
      if (n) f.metric.push_back(counter_of({{"route", route}, {"code", std::string(class_names[k])}}, n));
    }
  });
  return f;
}

// gRPC calls by route and grpc-status, as requests() shows HTTP answers.
MetricFamily grpc_calls(const config::config& cfg, std::span<const worker_metrics* const> workers) {
  MetricFamily f{"floodgate_grpc_responses_total",
                 "gRPC calls answered, by route and grpc-status (the upstream's, or the gateway's own answer).",
                 MetricType::Counter, {}};
  each_route_slot(cfg, [&](std::size_t slot, const std::string& route) {
    for (std::size_t k = 0; k < grpc_status_count; ++k) {
      auto n = sum(workers, [&](const worker_metrics& w) { return w.grpc_calls(slot, k); });
      if (n)
        f.metric.push_back(
            counter_of({{"route", route}, {"grpc_status", k + 1 < grpc_status_count ? std::to_string(k) : "other"}}, n));
    }
  });
  return f;
}

MetricFamily decisions(const config::config& cfg, std::span<const worker_metrics* const> workers) {
  MetricFamily f{"floodgate_ratelimit_decisions_total", "Rate-limit decisions, by route, limit and outcome.",
                 MetricType::Counter, {}};
  auto add = [&](const config::route_config& route, const config::limit_config& l) {
    if (l.index == metrics_layout::none) return;
    for (std::size_t o = 0; o < outcome_count; ++o) {
      auto n = sum(workers, [&](const worker_metrics& w) { return w.decisions(l.index, static_cast<outcome>(o)); });
      if (n == 0) continue;
      std::vector<ClientMetric::Label> labels{{"route", route.name}, {"limit", l.name}};
      if (!l.plan.empty()) labels.push_back({"plan", l.plan});
      labels.push_back({"outcome", std::string(outcome_names[o])});
      f.metric.push_back(counter_of(std::move(labels), n));
    }
  };
  for (const auto& route : cfg.routes)
    for (const auto& l : route.limits) {
      add(route, l);
      for (const auto& p : l.plans) add(route, p);
    }
  return f;
}

std::uint64_t sum_of(std::span<const worker_metrics* const> workers, std::uint64_t (worker_metrics::*f)() const) {
  std::uint64_t total = 0;
  for (const auto* w : workers) total += (w->*f)();
  return total;
}

// Store calls and the requests they carried (their ratio: requests per call, i.e. how
// well batching works), and failed calls by cause.
std::vector<MetricFamily> store(std::span<const worker_metrics* const> workers) {
  std::vector<MetricFamily> out;
  out.push_back({"floodgate_store_calls_total", "Calls to the rate-limit store (Redis script calls).",
                 MetricType::Counter, {counter_of({}, sum_of(workers, &worker_metrics::store_calls))}});
  out.push_back({"floodgate_store_call_requests_total", "Requests whose limits the store calls carried.",
                 MetricType::Counter, {counter_of({}, sum_of(workers, &worker_metrics::store_call_requests))}});
  MetricFamily errors{"floodgate_store_errors_total", "Failed store calls, by cause.", MetricType::Counter, {}};
  for (std::size_t c = 0; c < cause_count; ++c) {
    auto n = sum(workers, [&](const worker_metrics& w) { return w.store_errors(static_cast<store_cause>(c)); });
    if (n) errors.metric.push_back(counter_of({{"cause", std::string(cause_names[c])}}, n));
  }
  out.push_back(std::move(errors));
  return out;
}

// A histogram's series from per-bucket counts (the last +Inf) and the sum, in µs.
template <std::size_t N>
ClientMetric histogram_of(std::vector<ClientMetric::Label> labels, const std::array<std::uint64_t, N>& bounds,
                          std::span<const std::uint64_t> counts) {
  ClientMetric m;
  m.label = std::move(labels);
  std::uint64_t cumulative = 0;
  for (std::size_t b = 0; b < N; ++b) {
    cumulative += counts[b];
    m.histogram.bucket.push_back({cumulative, static_cast<double>(bounds[b]) / 1e6});
  }
  m.histogram.sample_count = cumulative + counts[N];  // the +Inf bucket, added by the serializer
  m.histogram.sample_sum = static_cast<double>(counts[N + 1]) / 1e6;
  return m;
}

// Upstream response time (to the response head) by route: routes that have had none
// show no series.
MetricFamily upstream_times(const config::config& cfg, std::span<const worker_metrics* const> workers) {
  MetricFamily f{"floodgate_upstream_response_seconds",
                 "Time from sending a request upstream to its response head, by route.", MetricType::Histogram, {}};
  for (const auto& r : cfg.routes) {
    if (r.slot == metrics_layout::none) continue;
    std::array<std::uint64_t, worker_metrics::upstream_width> total{}, one{};
    for (const auto* w : workers) {
      w->upstream_times(r.slot, one);
      for (std::size_t i = 0; i < total.size(); ++i) total[i] += one[i];
    }
    if (std::all_of(total.begin(), total.end() - 1, [](auto n) { return n == 0; })) continue;
    f.metric.push_back(histogram_of({{"route", r.name}}, upstream_bounds_us, total));
  }
  return f;
}

MetricFamily store_times(std::span<const worker_metrics* const> workers) {
  MetricFamily f{"floodgate_store_call_seconds", "Round trip of a store call (a batch of requests' limits).",
                 MetricType::Histogram, {}};
  std::array<std::uint64_t, store_bounds_us.size() + 2> total{}, one{};
  for (const auto* w : workers) {
    w->store_times(one);
    for (std::size_t i = 0; i < total.size(); ++i) total[i] += one[i];
  }
  f.metric.push_back(histogram_of({}, store_bounds_us, total));
  return f;
}

}  // namespace

std::vector<MetricFamily> upstream_servers(const process_gauges& gauges) {
  std::vector<MetricFamily> out;
  auto add = [&](const char* name, const char* help, MetricType type, auto value) {
    MetricFamily f{name, help, type, {}};
    for (const auto& s : gauges.upstream_servers) {
      std::vector<ClientMetric::Label> labels{{"upstream", s.upstream}, {"server", s.server}};
      const auto v = value(s);
      f.metric.push_back(type == MetricType::Counter ? counter_of(std::move(labels), static_cast<std::uint64_t>(v))
                                                     : gauge_of(std::move(labels), static_cast<double>(v)));
    }
    out.push_back(std::move(f));
  };
  using g = const upstream_server_gauge&;
  add("floodgate_upstream_server_requests_total", "Tries sent to each server of an upstream.", MetricType::Counter,
      [](g s) { return s.requests; });
  add("floodgate_upstream_server_failures_total",
      "Tries that failed on a server (connect failures, resets and timeouts before a response, eject.statuses).",
      MetricType::Counter, [](g s) { return s.failures; });
  add("floodgate_upstream_server_ejections_total", "Times a server was ejected (passive health).", MetricType::Counter,
      [](g s) { return s.ejections; });
  add("floodgate_upstream_server_retries_total", "Retries sent to a server after a try failed on another.",
      MetricType::Counter, [](g s) { return s.retries; });
  add("floodgate_upstream_server_active", "Requests in flight on a server (all workers).", MetricType::Gauge,
      [](g s) { return s.active; });
  add("floodgate_upstream_server_healthy", "1 while a server is in service, 0 while it is ejected or failing its health checks.", MetricType::Gauge,
      [](g s) { return s.healthy ? 1 : 0; });
  return out;
}

namespace {
// tracing.export's spans: sent, and dropped by reason.
std::vector<MetricFamily> trace_spans(const process_gauges& gauges) {
  std::vector<MetricFamily> out;
  out.push_back({"floodgate_trace_spans_exported_total", "Spans the collector took (tracing.export).",
                 MetricType::Counter, {counter_of({}, gauges.spans_exported)}});
  MetricFamily dropped{"floodgate_trace_spans_dropped_total",
                       "Spans not sent (tracing.export): the queue was full, or their export failed.",
                       MetricType::Counter, {}};
  dropped.metric.push_back(counter_of({{"reason", "queue_full"}}, gauges.spans_dropped_queue_full));
  dropped.metric.push_back(counter_of({{"reason", "export_failed"}}, gauges.spans_dropped_export_failed));
  out.push_back(std::move(dropped));
  return out;
}
}  // namespace

std::string render_metrics(const config::config& cfg, std::span<const worker_metrics* const> workers,
                           const process_gauges& gauges) {
  std::vector<MetricFamily> families;
  families.push_back(requests(cfg, workers));
  families.push_back(grpc_calls(cfg, workers));
  families.push_back(decisions(cfg, workers));
  families.push_back({"floodgate_deny_cache_hits_total", "Requests denied from the local deny cache, without the store.",
                      MetricType::Counter,
                      {counter_of({}, sum(workers, [](const worker_metrics& w) { return w.deny_cache_hits(); }))}});
  families.push_back(upstream_times(cfg, workers));
  // The store's own series with Redis only (the memory store makes no calls).
  if (cfg.store == config::store_kind::redis) {
    for (auto& f : store(workers)) families.push_back(std::move(f));
    families.push_back(store_times(workers));
  }
  families.push_back({"floodgate_downstream_connections", "Open downstream (client) connections.", MetricType::Gauge,
                      {gauge_of({}, static_cast<double>(gauges.open_connections))}});
  families.push_back({"floodgate_http2_connections", "Open downstream connections speaking HTTP/2.",
                      MetricType::Gauge,
                      {gauge_of({}, static_cast<double>(sum(workers, [](const worker_metrics& w) { return w.h2_connections(); })))}});
  families.push_back({"floodgate_http2_streams_total", "HTTP/2 streams (requests) begun by clients.", MetricType::Counter,
                      {counter_of({}, sum(workers, [](const worker_metrics& w) { return w.h2_streams(); }))}});
  families.push_back({"floodgate_upstream_idle_connections", "Idle upstream connections in the pools.",
                      MetricType::Gauge, {gauge_of({}, static_cast<double>(gauges.pooled_connections))}});
  for (auto& f : upstream_servers(gauges)) families.push_back(std::move(f));
  families.push_back({"floodgate_config_info", "The loaded configuration: its file's hash.", MetricType::Gauge,
                      {gauge_of({{"hash", cfg.hash}}, 1)}});
  MetricFamily reloads{"floodgate_config_reloads_total", "Configuration reloads, by result.", MetricType::Counter, {}};
  reloads.metric.push_back(counter_of({{"result", "ok"}}, gauges.reloads_ok));
  reloads.metric.push_back(counter_of({{"result", "failed"}}, gauges.reloads_failed));
  families.push_back(std::move(reloads));
  if (gauges.span_export)
    for (auto& f : trace_spans(gauges)) families.push_back(std::move(f));
  if (gauges.redis) {
    MetricFamily events{"floodgate_redis_connection_events_total",
                        "Redis connections closed and made again: no reply byte for redis.stall_timeout while "
                        "commands waited (stalled), a connect not done in that time (connect_timeout).",
                        MetricType::Counter, {}};
    events.metric.push_back(counter_of({{"event", "stalled"}}, gauges.redis_stalled));
    events.metric.push_back(counter_of({{"event", "connect_timeout"}}, gauges.redis_connect_timeouts));
    families.push_back(std::move(events));
  }
  if (gauges.sentinel) {
    MetricFamily events{"floodgate_redis_sentinel_events_total",
                        "Sentinel mode: the master the sentinels name changed (a failover followed), a server "
                        "named master answered ROLE as a replica, a sentinel announced +switch-master.",
                        MetricType::Counter, {}};
    events.metric.push_back(counter_of({{"event", "master_changed"}}, gauges.sentinel_master_changes));
    events.metric.push_back(counter_of({{"event", "not_master"}}, gauges.sentinel_not_master));
    events.metric.push_back(counter_of({{"event", "switch_master"}}, gauges.sentinel_switch_master));
    families.push_back(std::move(events));
  }
  if (gauges.cluster) {
    MetricFamily events{"floodgate_redis_cluster_events_total",
                        "Cluster mode: redirections followed (moved, ask), slot map refreshes (refresh, "
                        "refresh_failed), TRYAGAIN and CLUSTERDOWN answers, refunds of limits spanning slots.",
                        MetricType::Counter, {}};
    for (const auto& [name, n] : gauges.cluster_events) events.metric.push_back(counter_of({{"event", std::string(name)}}, n));
    families.push_back(std::move(events));
    MetricFamily nodes{"floodgate_redis_cluster_master_connections",
                       "Cluster mode: per master serving slots, the workers connected to it (of "
                       "floodgate_redis_cluster_workers).",
                       MetricType::Gauge, {}};
    for (const auto& [node, up] : gauges.cluster_nodes)
      nodes.metric.push_back(gauge_of({{"node", node}}, static_cast<double>(up)));
    families.push_back(std::move(nodes));
    families.push_back({"floodgate_redis_cluster_workers", "Cluster mode: the workers, each with its own connections.",
                        MetricType::Gauge, {gauge_of({}, static_cast<double>(gauges.workers))}});
  }
  families.push_back({"floodgate_build_info", "The running build.", MetricType::Gauge,
                      {gauge_of({{"version", std::string(gauges.version)}}, 1)}});
  // A family with no series yet is left out (its HELP and TYPE lines too).
  std::erase_if(families, [](const MetricFamily& f) { return f.metric.empty(); });
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace fg::obs
