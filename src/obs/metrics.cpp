#include "obs/metrics.hpp"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <functional>
#include <sstream>

namespace fg::obs {

worker_metrics::worker_metrics(const config::config& cfg)
    : routes_(cfg.routes.size()), limits_(0), requests_((routes_ + 1) * 5) {
  for (const auto& r : cfg.routes) limits_ += r.limits.size();
  decisions_ = std::vector<counter>(limits_ * outcome_count);
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
MetricFamily requests(const config::config& cfg, std::span<const worker_metrics* const> workers) {
  MetricFamily f{"floodgate_requests_total", "Requests answered, by route and status class.", MetricType::Counter, {}};
  if (workers.empty()) return f;
  for (std::size_t r = 0; r <= workers[0]->routes(); ++r)
    for (unsigned k = 0; k < 5; ++k) {
      auto n = sum(workers, [&](const worker_metrics& w) { return w.requests(r, k); });
      if (n == 0) continue;
      std::string route = r < cfg.routes.size() ? cfg.routes[r].name : "none";
      f.metric.push_back(counter_of({{"route", std::move(route)}, {"code", std::string(class_names[k])}}, n));
    }
  return f;
}

MetricFamily decisions(const config::config& cfg, std::span<const worker_metrics* const> workers) {
  MetricFamily f{"floodgate_ratelimit_decisions_total", "Rate-limit decisions, by route, limit and outcome.",
                 MetricType::Counter, {}};
  if (workers.empty()) return f;
  for (const auto& route : cfg.routes)
    for (const auto& l : route.limits) {
      if (l.index >= workers[0]->limits()) continue;
      for (std::size_t o = 0; o < outcome_count; ++o) {
        auto n = sum(workers, [&](const worker_metrics& w) { return w.decisions(l.index, static_cast<outcome>(o)); });
        if (n == 0) continue;
        f.metric.push_back(
            counter_of({{"route", route.name}, {"limit", l.name}, {"outcome", std::string(outcome_names[o])}}, n));
      }
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

}  // namespace

std::string render_metrics(const config::config& cfg, std::span<const worker_metrics* const> workers,
                           const process_gauges& gauges) {
  std::vector<MetricFamily> families;
  families.push_back(requests(cfg, workers));
  families.push_back(decisions(cfg, workers));
  families.push_back({"floodgate_deny_cache_hits_total", "Requests denied from the local deny cache, without the store.",
                      MetricType::Counter,
                      {counter_of({}, sum(workers, [](const worker_metrics& w) { return w.deny_cache_hits(); }))}});
  for (auto& f : store(workers)) families.push_back(std::move(f));
  families.push_back({"floodgate_downstream_connections", "Open downstream (client) connections.", MetricType::Gauge,
                      {gauge_of({}, static_cast<double>(gauges.open_connections))}});
  families.push_back({"floodgate_upstream_idle_connections", "Idle upstream connections in the pools.",
                      MetricType::Gauge, {gauge_of({}, static_cast<double>(gauges.pooled_connections))}});
  families.push_back({"floodgate_config_info", "The loaded configuration: its file's hash.", MetricType::Gauge,
                      {gauge_of({{"hash", cfg.hash}}, 1)}});
  families.push_back({"floodgate_build_info", "The running build.", MetricType::Gauge,
                      {gauge_of({{"version", std::string(gauges.version)}}, 1)}});
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace fg::obs
