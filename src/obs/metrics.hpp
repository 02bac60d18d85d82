#pragma once
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"

// Counters of the hot path, one set per worker: each is written by its worker's thread
// alone (a relaxed load and store, no read-modify-write, no sharing between cores) and
// summed over the workers when /metrics is scraped, on the admin's thread. Labels are
// bounded by the configuration: routes, limits, status classes and outcomes, never a
// client, a key or a path.
namespace fg::obs {

// What one limit said about one request (floodgate_ratelimit_decisions_total's outcome).
enum class outcome : unsigned {
  allowed,
  denied,
  shadow_denied,
  store_error_allowed,
  store_error_denied,
  local_fallback,
};
inline constexpr std::size_t outcome_count = 6;
inline constexpr std::string_view outcome_names[outcome_count] = {
    "allowed", "denied", "shadow_denied", "store_error_allowed", "store_error_denied", "local_fallback"};

// Why a store call failed (floodgate_store_errors_total's cause).
enum class store_cause : unsigned { timeout, disconnected, not_connected, protocol, other };
inline constexpr std::size_t cause_count = 5;
inline constexpr std::string_view cause_names[cause_count] = {"timeout", "disconnected", "not_connected", "protocol",
                                                              "other"};

class worker_metrics {
 public:
  // Sized for `cfg`: its routes (and "no route") and its limits (limit_config::index).
  explicit worker_metrics(const config::config& cfg);

  // A request answered with `status` on route `route` (-1: none matched, or before one).
  void request(int route, unsigned status) {
    const std::size_t slot = route < 0 || static_cast<std::size_t>(route) >= routes_ ? routes_ : route;
    const unsigned klass = status >= 100 && status < 600 ? status / 100 - 1 : 4;
    bump(requests_[slot * 5 + klass]);
  }
  void decision(std::size_t limit_index, outcome o) {
    if (limit_index < limits_) bump(decisions_[limit_index * outcome_count + static_cast<unsigned>(o)]);
  }
  void deny_cache_hit() { bump(deny_cache_hits_); }
  // One call to the store carrying `requests` requests' limits (a batch).
  void store_call(std::size_t requests) {
    bump(store_calls_);
    store_call_requests_.store(read(store_call_requests_) + requests, std::memory_order_relaxed);
  }
  void store_error(store_cause c) { bump(store_errors_[static_cast<unsigned>(c)]); }

  // Read from any thread.
  std::uint64_t requests(std::size_t route_slot, unsigned klass) const { return read(requests_[route_slot * 5 + klass]); }
  std::uint64_t decisions(std::size_t limit_index, outcome o) const {
    return read(decisions_[limit_index * outcome_count + static_cast<unsigned>(o)]);
  }
  std::uint64_t deny_cache_hits() const { return read(deny_cache_hits_); }
  std::uint64_t store_calls() const { return read(store_calls_); }
  std::uint64_t store_call_requests() const { return read(store_call_requests_); }
  std::uint64_t store_errors(store_cause c) const { return read(store_errors_[static_cast<unsigned>(c)]); }
  std::size_t routes() const { return routes_; }
  std::size_t limits() const { return limits_; }

 private:
  using counter = std::atomic<std::uint64_t>;
  static void bump(counter& c) { c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  static std::uint64_t read(const counter& c) { return c.load(std::memory_order_relaxed); }

  std::size_t routes_, limits_;
  std::vector<counter> requests_;   // (routes + 1) x 5 status classes
  std::vector<counter> decisions_;  // limits x outcomes
  counter deny_cache_hits_{0};
  counter store_calls_{0}, store_call_requests_{0};
  counter store_errors_[cause_count] = {};
};

// What a scrape shows besides the workers' counters.
struct process_gauges {
  std::uint64_t open_connections = 0;
  std::uint64_t pooled_connections = 0;  // idle upstream connections in the workers' pools
  std::string_view version;
};

// The Prometheus text exposition (format 0.0.4) of `workers` under `cfg`, serialized by
// prometheus-cpp's TextSerializer.
std::string render_metrics(const config::config& cfg, std::span<const worker_metrics* const> workers,
                           const process_gauges& gauges);

}  // namespace fg::obs
