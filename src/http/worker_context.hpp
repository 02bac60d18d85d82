#pragma once
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <utility>

#include "deadline/board.hpp"
#include "http/compiled_config.hpp"
#include "obs/logging.hpp"
#include "util/block_pool.hpp"

namespace fg::upstream { class pool; }
namespace fg::limit { class decision_source; }
namespace fg::obs { class access_log; class span_exporter; class worker_metrics; }

namespace fg::http {

// Open downstream connections of the whole process, held against http.max_connections.
struct connection_limit {
  std::size_t max = 0;
  std::atomic<std::size_t> open{0};
  obs::periodic_count refused;  // reported in a log line every 5 s at most
};

// One place of a connection_limit, held by a downstream connection for its whole life
// (through its sessions and while it is parked) and given back when the connection
// ends, however it ends: the one count down, as take() is the one count up.
class connection_slot {
 public:
  // A place under `limit` (none: a connection counted nowhere), nullopt when it is full.
  static std::optional<connection_slot> take(connection_limit* limit) {
    if (!limit) return connection_slot{};
    if (limit->open.fetch_add(1, std::memory_order_relaxed) < limit->max) return connection_slot{limit};
    limit->open.fetch_sub(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  connection_slot() = default;
  connection_slot(connection_slot&& o) noexcept : limit_(std::exchange(o.limit_, nullptr)) {}
  connection_slot& operator=(connection_slot&& o) noexcept {
    if (this != &o) {
      give_back();
      limit_ = std::exchange(o.limit_, nullptr);
    }
    return *this;
  }
  connection_slot(const connection_slot&) = delete;
  connection_slot& operator=(const connection_slot&) = delete;
  ~connection_slot() { give_back(); }

 private:
  explicit connection_slot(connection_limit* l) : limit_(l) {}
  void give_back() {
    if (limit_) limit_->open.fetch_sub(1, std::memory_order_relaxed);
    limit_ = nullptr;
  }
  connection_limit* limit_ = nullptr;
};

// The limits' decision source of one configuration generation, and how many requests
// are using it: a reload that changes the store replaces it, and the worker destroys
// the old one once no request uses it any more (worker thread only).
struct limits_in_use {
  limit::decision_source* source = nullptr;
  std::size_t requests = 0;
};

// What a session needs from the worker that owns it. Lives on the worker's thread;
// the worker fills it in and owns what it points to.
struct worker_context {
  // What a configuration swap rebuilds (a session holds `rt` for a whole request, so
  // the others are swapped with it, between requests): the snapshot, the upstream pool
  // (keyed by upstream name, so that pooled connections of upstreams that remain stay),
  // the limits' decision source and the access log.
  std::shared_ptr<const compiled_config> rt;
  upstream::pool* pool = nullptr;
  limits_in_use* limits = nullptr;
  std::shared_ptr<obs::access_log> access;

  // For the worker's life.
  deadline::board deadlines;                // every connection's current wait
  connection_limit* connections = nullptr;  // shared by all workers
  obs::worker_metrics* metrics = nullptr;   // this worker's counters (read at scrape time)
  obs::span_exporter* spans = nullptr;      // tracing.export's queue (none: no export)
  // Body buffers, lent to a session while it relays a body (see http::detail::body_chunk).
  util::block_pool bodies{32 * 1024, 16};
  bool draining = false;
  unsigned id = 0;
  std::size_t parked = 0;  // keep-alive connections parked now: a socket and a wait, no session
  std::size_t delayed = 0;  // requests waiting for their turn now (on_exceed: delay; http.max_delayed)
  // TLS handshakes in progress, oldest first (at most tls.max_handshakes: past it the
  // oldest is ended for the newest), and the connections ended so or failing their
  // handshake (the log lines' counts).
  struct handshake {
    deadline::entry* watch;
    bool listed = true;  // false once ended for a newer one (off the list)
  };
  std::list<handshake*> handshakes;
  std::uint64_t handshakes_refused = 0, handshakes_failed = 0;
};

}  // namespace fg::http
