#pragma once
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "upstream/servers.hpp"

namespace fg::upstream {

// Active health checks (upstreams.<name>.health), one checker per process on a thread of
// its own: a GET of the check's path to every server of every upstream that has one,
// each on its own interval, staggered over it. What a check finds goes into the
// server's shared health, so every worker sees a server leave or come back at once (a
// log line on each change). A server starts in service; `fall` failed checks in a row
// take it out until `rise` passes in a row bring it back. At most `max_in_flight` checks
// run at once; a server whose turn finds none free waits for its next one.
class health_checker {
 public:
  static constexpr std::size_t max_in_flight = 256;
  health_checker();
  ~health_checker();
  health_checker(const health_checker&) = delete;
  health_checker& operator=(const health_checker&) = delete;

  // The servers to check, on start and after each reload (their health objects are the
  // workers'; a reload that keeps a server keeps its state). The thread starts with the
  // first set that has a check. Thread-safe (the start and a reload may race).
  void update(std::shared_ptr<const server_set> set);
  // Ends every check under way; the thread joins.
  void stop();

  struct state;  // (health_checker.cpp)

 private:
  std::mutex mu_;  // update() and stop(): the thread is started and joined once
  std::unique_ptr<state> st_;
  std::thread thread_;
};

// What one check came to: `none` is a pass; `status` is the answer's, when one came.
struct check_result {
  failure_kind why = failure_kind::none;
  unsigned status = 0;
};

// Whether `status` passes: one of h.statuses, or 2xx and 3xx when it lists none.
bool check_passes(const config::health_check_config& h, unsigned status);

// Counts one check's result against the server's health (its checks passed and failed
// in a row are kept there, through the reloads that keep the server); true when the
// server left or came back.
bool record_check(const upstream_servers& u, const server& s, check_result r);

}  // namespace fg::upstream
