#pragma once
#include <string>

#include "config/config.hpp"

namespace fg::admin {

// What /readyz answers: ready, or why not (one line, for an operator).
struct readiness {
  bool ready = false;
  std::string reason;
};

// What the admin listener may know of the process, from its own thread: the layer
// above (app) implements it over thread-safe state only (the workers' atomics, the
// current snapshot), so the admin never touches a worker's objects.
class status_source {
 public:
  virtual ~status_source() = default;
  // The configuration in effect (never null once the server runs).
  virtual config::snapshot current_config() const = 0;
  virtual readiness ready() const = 0;
  // The Prometheus text of the process' counters, gathered now.
  virtual std::string metrics() const = 0;
};

}  // namespace fg::admin
