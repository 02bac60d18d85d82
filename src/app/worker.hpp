#pragma once
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "http/worker_context.hpp"
#include "obs/metrics.hpp"
#include "store/memory_store.hpp"
#include "limit/policy.hpp"
#include "store/redis_batcher.hpp"
#include "store/script_call.hpp"
#include "limit/deny_cache.hpp"
#include "store/memory_source.hpp"
#include "store/redis_source.hpp"
#include "redis/cluster.hpp"
#include "redis/connection.hpp"
#include "upstream/pool.hpp"

namespace fg::app {

// A worker's link to Redis: one connection (standalone, Sentinel), or a cluster client
// (a connection per master).
struct redis_link {
  std::shared_ptr<redis::connection> one;
  std::shared_ptr<redis::cluster_client> cluster;
  explicit operator bool() const { return one || cluster; }
  void start() const { one ? one->start() : cluster->start(); }
  void stop() const { one ? one->stop() : cluster->stop(); }
  bool connected() const { return one ? one->connected() : cluster->connected(); }
  void reset() {
    one.reset();
    cluster.reset();
  }
};

// One event loop on one thread: accepts on its own copy of the listening socket and
// owns every connection it accepts, its upstream pool and its Redis link.
class worker {
 public:
  worker(unsigned id, std::shared_ptr<const http::compiled_config> rt, std::shared_ptr<obs::access_log> access,
         store::memory_store* memory, http::connection_limit* connections, obs::span_exporter* spans = nullptr);
  ~worker();

  // `listen_fd` (bound, perhaps not listening yet) is duplicated, and `tls_fd` (the TLS
  // listener's, -1: none); the worker's thread starts, and its store connects. Nothing
  // is accepted before accept().
  void start(int listen_fd, int tls_fd = -1);
  // Thread-safe. Starts accepting on the listening socket (once it listens).
  void accept();
  // Thread-safe. Stop accepting, close idle connections, let in-flight requests finish.
  void drain();
  // Thread-safe. Abandon whatever is still running.
  void stop();
  void join();
  // Thread-safe (a reload). Requests whose head arrives afterwards use `rt` (and
  // `access`); those in flight finish under the snapshot they started with. Pooled
  // connections of upstreams that remain (same address) stay. A changed store or redis
  // section gets a new decision source, and the snapshot takes effect with it once it
  // is connected (at most 2 s later); the old source is kept until no request uses it.
  // `applied` runs on the worker's thread once the snapshot is in effect.
  void update(std::shared_ptr<const http::compiled_config> rt, std::shared_ptr<obs::access_log> access,
              std::function<void()> applied);
  // Thread-safe. The store answers (Redis connected; always with the memory store), as
  // of the last sweeper tick.
  bool store_usable() const { return store_usable_.load(std::memory_order_relaxed); }
  // Thread-safe. Cluster mode: each master serving slots and whether this worker is
  // connected to it, as of the last sweeper tick (empty otherwise).
  std::vector<std::pair<std::string, bool>> cluster_masters() const {
    std::lock_guard lock(masters_mu_);
    return masters_;
  }
  // Thread-safe to read (relaxed counters): summed at scrape time.
  const obs::worker_metrics& metrics() const { return metrics_; }
  std::size_t pooled_connections() const { return pool_->idle_total(); }

 private:
  // The limits of one configuration generation: the store's decision source (memory,
  // or Redis: connection, batcher, source) behind the policy that sessions ask.
  struct limits_stack {
    http::limits_in_use use;
    redis_link redis;
    std::unique_ptr<store::redis_evaluator> batcher;
    std::unique_ptr<store::redis_source> source;
    std::unique_ptr<limit::deny_cache> denies;
    std::unique_ptr<limit::policy> policy;
    // The resets an admin made (POST /limits/reset, on any gateway) read from the store:
    // what was read last, and whether a read is on its way. Shared with its completion,
    // which may come after the stack is gone (`denies` null then).
    struct resets_read {
      limit::deny_cache* denies = nullptr;
      std::string key;  // store::resets_key
      double seen = 0;  // the newest reset's time (Redis ms) read so far
      bool in_flight = false;
    };
    std::shared_ptr<resets_read> resets;
    std::int64_t idle_since = 0;  // retired: when no request used it any more (ms)
    std::int64_t ready_by = 0;    // pending: swapped in by then, connected or not (ms)
    // Pending: what takes effect with it, and whom to tell.
    std::shared_ptr<const http::compiled_config> rt;
    std::shared_ptr<obs::access_log> access;
    std::function<void()> applied;
    void shut();
  };
  std::unique_ptr<limits_stack> make_limits(const config::config& cfg);
  void use_limits(std::unique_ptr<limits_stack> next);
  // The snapshot in effect for requests whose head arrives from now on.
  void apply(std::shared_ptr<const http::compiled_config> rt, std::shared_ptr<obs::access_log> access);
  // The sweeper's part of a reload: a pending stack swapped in, unused ones destroyed.
  void tend_limits(std::int64_t now_ms);
  // Every few ticks: the resets made since the last read, forgotten by the deny cache.
  void read_resets();
  boost::asio::awaitable<void> accept_loop(boost::asio::ip::tcp::acceptor& from, bool tls);
  boost::asio::awaitable<void> sweep_deadlines();
  // Counts a new connection against http.max_connections (its place, held until the
  // connection ends); past it, answers 503, closes it and says nullopt.
  std::optional<http::connection_slot> admit(boost::asio::ip::tcp::socket& socket, bool tls);

  // Sessions unregister from ctx_ when the io_context destroys their frames, so ctx_
  // is declared first and the io_context is torn down explicitly in the destructor.
  obs::worker_metrics metrics_;  // before ctx_, which points to it
  http::worker_context ctx_;
  std::unique_ptr<boost::asio::io_context> ioc_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> tls_acceptor_;
  std::unique_ptr<upstream::pool> pool_;
  std::unique_ptr<store::memory_source> memory_;  // the memory store's source, for every generation
  std::unique_ptr<limits_stack> limits_;          // in use
  std::unique_ptr<limits_stack> pending_;         // connecting, after a reload changed the store
  std::vector<std::unique_ptr<limits_stack>> retired_;
  unsigned generation_ = 0;
  // Written by this worker's sweeper only, read by the admin thread (/readyz).
  std::atomic<bool> store_usable_{true};
  mutable std::mutex masters_mu_;
  std::vector<std::pair<std::string, bool>> masters_;
  std::thread thread_;
};

}  // namespace fg::app
