#pragma once
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>

#include "deadline/board.hpp"
#include "http/compiled_config.hpp"
#include "obs/logging.hpp"
#include "util/block_pool.hpp"

namespace fg::upstream { class pool; }
namespace fg::limit { class decision_source; }
namespace fg::obs { class access_log; class worker_metrics; }

namespace fg::http {

// Open downstream connections of the whole process, held against http.max_connections.
struct connection_limit {
  std::size_t max = 0;
  std::atomic<std::size_t> open{0};
  obs::periodic_count refused;  // reported in a log line every 5 s at most
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
