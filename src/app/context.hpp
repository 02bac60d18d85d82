#pragma once
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>

#include "app/runtime.hpp"
#include "obs/logging.hpp"
#include "util/block_pool.hpp"

namespace fg::upstream { class pool; }
namespace fg::limit { class memory_store; class deny_cache; class redis_batcher; }
namespace fg::redis { class connection; }
namespace fg::obs { class access_log; }

namespace fg::app {

// Deadlines are checked by each worker's sweeper every `sweep_interval`. `coarse_now`
// is the worker thread's steady_clock::now() as of the sweeper's last tick, so setting
// a deadline reads no clock; deadline_after() adds one interval, so that a deadline
// never fires early (it fires up to two intervals late).
inline constexpr std::chrono::milliseconds sweep_interval{50};
inline thread_local std::chrono::steady_clock::time_point coarse_now = std::chrono::steady_clock::now();
// A keep-alive connection idle this long gives its buffers back (see session).
inline constexpr std::chrono::milliseconds lean_after{100};
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::duration d) {
  return coarse_now + sweep_interval + d;
}

// A live downstream connection, as its worker sees it: for drain, and for deadlines.
// Instead of a timer per operation, a session writes the deadline of its current wait
// here and the worker's sweeper cancels both of its sockets once it has passed.
struct session_entry {
  using clock = std::chrono::steady_clock;
  boost::asio::ip::tcp::socket* socket = nullptr;
  boost::asio::ip::tcp::socket* upstream = nullptr;  // the upstream connection in use, if any
  clock::time_point deadline = clock::time_point::max();
  bool expired = false;  // the sweeper cancelled the current wait
  bool idle = true;      // waiting for a request with nothing buffered: safe to close on drain
  // While idle, at lean_at the sweeper cancels the read (setting `lean`), and the
  // session waits on without buffers.
  bool lean = false;
  clock::time_point lean_at = clock::time_point::max();

  void arm(std::chrono::milliseconds timeout) {
    expired = false;
    deadline = deadline_after(timeout);
  }
  void arm_at(clock::time_point when) {
    expired = false;
    deadline = when;
  }
};

// Open downstream connections of the whole process, held against http.max_connections.
struct connection_limit {
  std::size_t max = 0;
  std::atomic<std::size_t> open{0};
  obs::periodic_count refused;  // reported in a log line every 5 s at most
};

// What a session needs from the worker that owns it. Lives on the worker's thread.
struct worker_context {
  std::shared_ptr<const runtime> rt;
  upstream::pool* pool = nullptr;
  limit::memory_store* memory = nullptr;  // shared by all workers (thread-safe)
  redis::connection* redis = nullptr;     // this worker's own, when store: redis
  limit::redis_batcher* batcher = nullptr;  // batches its script calls
  limit::deny_cache* denies = nullptr;    // this worker's recent Redis denials
  std::string nonce_prefix;               // random per process: request nonces never collide
  std::uint64_t next_lease = 0;
  std::shared_ptr<obs::access_log> access;
  std::list<session_entry> sessions;
  connection_limit* connections = nullptr;  // shared by all workers
  // Body buffers, lent to a session while it relays a body (see http::detail::body_chunk).
  util::block_pool bodies{32 * 1024, 16};
  bool draining = false;
  unsigned id = 0;
};

}  // namespace fg::app
