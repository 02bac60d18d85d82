#pragma once
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <memory>
#include <thread>

#include "http/context.hpp"
#include "obs/metrics.hpp"
#include "limit/memory_store.hpp"
#include "limit/policy.hpp"
#include "limit/redis_store.hpp"
#include "limit/sources.hpp"
#include "redis/connection.hpp"
#include "upstream/pool.hpp"

namespace fg::app {

// One event loop on one thread: accepts on its own copy of the listening socket and
// owns every connection it accepts, its upstream pool, and (later) its Redis client.
class worker {
 public:
  worker(unsigned id, std::shared_ptr<const http::runtime> rt, std::shared_ptr<obs::access_log> access,
         limit::memory_store* memory, http::connection_limit* connections);
  ~worker();

  // `listen_fd` is duplicated; the worker's thread starts.
  void start(int listen_fd);
  // Thread-safe. Stop accepting, close idle connections, let in-flight requests finish.
  void drain();
  // Thread-safe. Abandon whatever is still running.
  void stop();
  void join();
  // Thread-safe. Later requests use the new snapshot.
  void update(std::shared_ptr<const http::runtime> rt);
  // Thread-safe. The store answers (Redis connected; always with the memory store), as
  // of the last sweeper tick.
  bool store_usable() const { return store_usable_.load(std::memory_order_relaxed); }
  // Thread-safe to read (relaxed counters): summed at scrape time.
  const obs::worker_metrics& metrics() const { return metrics_; }
  std::size_t pooled_connections() const { return pool_->idle_total(); }

 private:
  boost::asio::awaitable<void> accept_loop();
  boost::asio::awaitable<void> sweep_deadlines();
  // Counts a new connection against http.max_connections; past it, answers 503 and closes.
  bool admit(boost::asio::ip::tcp::socket& socket);

  // Sessions unregister from ctx_ when the io_context destroys their frames, so ctx_
  // is declared first and the io_context is torn down explicitly in the destructor.
  obs::worker_metrics metrics_;  // before ctx_, which points to it
  http::worker_context ctx_;
  std::unique_ptr<boost::asio::io_context> ioc_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
  std::unique_ptr<upstream::pool> pool_;
  // The limits: the store's decision source behind the policy that sessions ask.
  std::unique_ptr<limit::memory_source> memory_;
  std::shared_ptr<redis::connection> redis_;
  std::unique_ptr<limit::redis_batcher> batcher_;
  std::unique_ptr<limit::redis_source> redis_source_;
  std::unique_ptr<limit::deny_cache> denies_;
  std::unique_ptr<limit::policy> limits_;
  // Written by this worker's sweeper only, read by the admin thread (/readyz).
  std::atomic<bool> store_usable_{true};
  std::thread thread_;
};

}  // namespace fg::app
