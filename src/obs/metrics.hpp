#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
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
  delayed,  // admitted to wait for its turn (on_exceed: delay)
};
inline constexpr std::size_t outcome_count = 7;
inline constexpr std::string_view outcome_names[outcome_count] = {
    "allowed", "denied", "shadow_denied", "store_error_allowed", "store_error_denied", "local_fallback", "delayed"};

// Why a store call failed (floodgate_store_errors_total's cause).
enum class store_cause : unsigned { timeout, disconnected, not_connected, protocol, other };
inline constexpr std::size_t cause_count = 5;
inline constexpr std::string_view cause_names[cause_count] = {"timeout", "disconnected", "not_connected", "protocol",
                                                              "other"};

// Histogram bounds, in microseconds (the last bucket, +Inf, is implied). Few for the
// upstream's, which is per route (7 lines a route that has answered): 20 routes of 3
// limits, each limit both allowing and denying, stay under 300 lines in all.
// gRPC statuses (floodgate_grpc_responses_total's grpc_status): 0 to 16, then one
// series for any other number.
inline constexpr std::size_t grpc_status_count = 18;

inline constexpr std::array<std::uint64_t, 4> upstream_bounds_us = {10'000, 50'000, 250'000, 1'000'000};
inline constexpr std::array<std::uint64_t, 8> store_bounds_us = {250, 500, 1'000, 2'500, 5'000, 10'000, 25'000, 100'000};

// Where each route's and each limit's counters live, by name, for the process' life:
// a reload keeps the slot of a route or limit that stays (its counts go on), gives a
// new one to a new name, and keeps a removed one's (it may come back). So a request
// that started under the old configuration counts in the right place. Bounded: past
// max_slots names, new ones are not counted (logged once).
class metrics_layout {
 public:
  static constexpr std::size_t max_slots = 4096;
  static constexpr std::size_t none = static_cast<std::size_t>(-1);
  // Sets route_config::slot and limit_config::index of every route and limit of `cfg`.
  void assign(config::config& cfg);

 private:
  std::size_t slot_of(std::unordered_map<std::string, std::size_t>& names, std::string name);
  std::unordered_map<std::string, std::size_t> routes_, limits_;
  bool warned_ = false;
};

// Counters in blocks that never move, `Width` per slot: the owner's thread adds blocks
// (at a reload, before any request uses a new slot), any thread reads.
template <std::size_t Width>
class counter_table {
 public:
  using counter = std::atomic<std::uint64_t>;
  static constexpr std::size_t block_slots = 64;
  counter_table() = default;
  counter_table(const counter_table&) = delete;
  counter_table& operator=(const counter_table&) = delete;
  ~counter_table() {
    for (auto& b : blocks_) delete[] b.load(std::memory_order_relaxed);
  }
  // The owner's thread: slots [0, n) exist afterwards.
  void reserve(std::size_t n) {
    for (std::size_t b = 0; b * block_slots < n && b < blocks_.size(); ++b)
      if (!blocks_[b].load(std::memory_order_relaxed))
        blocks_[b].store(new counter[block_slots * Width](), std::memory_order_release);
  }
  // The slot's counters, or null (not reserved, or past the cap).
  counter* row(std::size_t slot, std::memory_order order = std::memory_order_relaxed) const {
    const std::size_t b = slot / block_slots;
    if (b >= blocks_.size()) return nullptr;
    counter* block = blocks_[b].load(order);
    return block ? block + (slot % block_slots) * Width : nullptr;
  }

 private:
  std::array<std::atomic<counter*>, metrics_layout::max_slots / block_slots> blocks_{};
};

class worker_metrics {
 public:
  using counter = std::atomic<std::uint64_t>;
  static constexpr std::size_t upstream_width = upstream_bounds_us.size() + 2;  // buckets, +Inf, sum

  // Room for the slots `cfg` uses (metrics_layout::assign has set them). At the start
  // on any thread; at a reload on the worker's thread, before the new snapshot is used.
  void reserve(const config::config& cfg);

  // A request answered with `status` on the route of metrics slot `slot` (none: no route).
  void request(std::size_t slot, unsigned status) {
    const unsigned klass = status >= 100 && status < 600 ? status / 100 - 1 : 4;
    if (slot == metrics_layout::none) return bump(unrouted_[klass]);
    if (auto* r = requests_.row(slot)) bump(r[klass]);
  }
  // A gRPC call answered with grpc-status `code` (the upstream's trailers, or the
  // gateway's own answer) on the route of metrics slot `slot`.
  void grpc_call(std::size_t slot, int code) {
    const std::size_t k = code >= 0 && code < 17 ? static_cast<std::size_t>(code) : grpc_status_count - 1;
    if (slot == metrics_layout::none) return bump(unrouted_grpc_[k]);
    if (auto* r = grpc_.row(slot)) bump(r[k]);
  }
  // The upstream's answer (response head) took `us` microseconds, on route `slot`.
  void upstream_time(std::size_t slot, std::uint64_t us) {
    if (auto* r = upstream_.row(slot)) observe(r, upstream_bounds_us, us);
  }
  void decision(std::size_t limit_index, outcome o) {
    if (auto* r = decisions_.row(limit_index)) bump(r[static_cast<unsigned>(o)]);
  }
  void deny_cache_hit() { bump(deny_cache_hits_); }
  // One call to the store carrying `requests` requests' limits (a batch).
  void store_call(std::size_t requests) {
    bump(store_calls_);
    store_call_requests_.store(read(store_call_requests_) + requests, std::memory_order_relaxed);
  }
  // A store call answered in `us` microseconds.
  void store_time(std::uint64_t us) { observe(store_latency_.data(), store_bounds_us, us); }
  void store_error(store_cause c) { bump(store_errors_[static_cast<unsigned>(c)]); }
  // An HTTP/2 connection opened (+1) or ended (-1); a stream begun on one.
  void h2_connection(int delta) {
    h2_connections_.store(read(h2_connections_) + static_cast<std::uint64_t>(delta), std::memory_order_relaxed);
  }
  void h2_stream() { bump(h2_streams_); }

  // Read from any thread.
  std::uint64_t requests(std::size_t slot, unsigned klass) const {
    if (slot == metrics_layout::none) return read(unrouted_[klass]);
    auto* r = requests_.row(slot, std::memory_order_acquire);
    return r ? read(r[klass]) : 0;
  }
  std::uint64_t grpc_calls(std::size_t slot, std::size_t k) const {
    if (slot == metrics_layout::none) return read(unrouted_grpc_[k]);
    auto* r = grpc_.row(slot, std::memory_order_acquire);
    return r ? read(r[k]) : 0;
  }
  std::uint64_t decisions(std::size_t limit_index, outcome o) const {
    auto* r = decisions_.row(limit_index, std::memory_order_acquire);
    return r ? read(r[static_cast<unsigned>(o)]) : 0;
  }
  // Per bucket (not cumulative; the last is +Inf), then the sum in microseconds.
  void upstream_times(std::size_t slot, std::span<std::uint64_t, upstream_width> out) const;
  void store_times(std::span<std::uint64_t, store_bounds_us.size() + 2> out) const;
  std::uint64_t deny_cache_hits() const { return read(deny_cache_hits_); }
  std::uint64_t store_calls() const { return read(store_calls_); }
  std::uint64_t store_call_requests() const { return read(store_call_requests_); }
  std::uint64_t store_errors(store_cause c) const { return read(store_errors_[static_cast<unsigned>(c)]); }
  std::uint64_t h2_connections() const { return read(h2_connections_); }
  std::uint64_t h2_streams() const { return read(h2_streams_); }

 private:
  static void bump(counter& c) { c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  static void add(counter& c, std::uint64_t n) { c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  static std::uint64_t read(const counter& c) { return c.load(std::memory_order_relaxed); }
  template <std::size_t N>
  static void observe(counter* row, const std::array<std::uint64_t, N>& bounds, std::uint64_t us) {
    std::size_t b = 0;
    while (b < N && us > bounds[b]) ++b;
    bump(row[b]);
    add(row[N + 1], us);
  }

  counter_table<5> requests_;  // per route slot, by status class
  counter_table<upstream_width> upstream_;
  counter_table<outcome_count> decisions_;  // per limit slot
  counter unrouted_[5] = {};
  counter_table<grpc_status_count> grpc_;  // per route slot, by grpc-status
  counter unrouted_grpc_[grpc_status_count] = {};
  counter deny_cache_hits_{0};
  counter store_calls_{0}, store_call_requests_{0};
  std::array<counter, store_bounds_us.size() + 2> store_latency_{};
  counter store_errors_[cause_count] = {};
  counter h2_connections_{0}, h2_streams_{0};
};

// One server of an upstream, as the scrape shows it (upstream::server_health).
struct upstream_server_gauge {
  std::string upstream, server;
  std::uint64_t requests = 0, failures = 0, ejections = 0, retries = 0;
  std::int64_t active = 0;
  bool healthy = true;
};

// What a scrape shows besides the workers' counters.
struct process_gauges {
  std::vector<upstream_server_gauge> upstream_servers;
  std::uint64_t open_connections = 0;
  std::uint64_t pooled_connections = 0;  // idle upstream connections in the workers' pools
  std::uint64_t reloads_ok = 0, reloads_failed = 0;
  // tracing.export (when on): spans sent, and dropped (queue full, export failed)
  bool span_export = false;
  std::uint64_t spans_exported = 0, spans_dropped_queue_full = 0, spans_dropped_export_failed = 0;
  bool redis = false;  // store: redis: its connections' events are shown
  std::uint64_t redis_stalled = 0, redis_connect_timeouts = 0;
  bool sentinel = false;  // redis.mode sentinel: its events are shown
  std::uint64_t sentinel_master_changes = 0, sentinel_not_master = 0, sentinel_switch_master = 0;
  bool cluster = false;  // redis.mode cluster: its events and nodes are shown
  // (event name, count): MOVED and ASK followed, map refreshes, ...
  std::vector<std::pair<std::string_view, std::uint64_t>> cluster_events;
  // (master "host:port", how many workers are connected to it), and the worker count.
  std::vector<std::pair<std::string, std::size_t>> cluster_nodes;
  std::size_t workers = 0;
  std::string_view version;
};

// The Prometheus text exposition (format 0.0.4) of `workers` under `cfg`, serialized by
// prometheus-cpp's TextSerializer.
std::string render_metrics(const config::config& cfg, std::span<const worker_metrics* const> workers,
                           const process_gauges& gauges);

}  // namespace fg::obs
