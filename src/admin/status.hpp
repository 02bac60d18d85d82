#pragma once
#include <functional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "limit/consumers.hpp"
#include "upstream/servers.hpp"

namespace fg::admin {

// One thing /readyz looked at (`/readyz?verbose` lists them all).
struct readiness_check {
  std::string name;    // "config", "startup", "store", ...
  bool ok = true;
  bool required = true;  // whether a failure makes the instance unready
  std::string detail;    // what was found, for an operator
};

// What /readyz answers: ready, or why not (one line, for an operator), and each check.
struct readiness {
  bool ready = false;
  std::string reason;
  std::vector<readiness_check> checks;
};

// What a reload did: swapped in (the file's hash; settings that need a restart to take
// effect), or rejected (the file's errors, FILE:LINE:COL: message; the old one serves).
struct reload_outcome {
  bool ok = false;
  std::string hash;
  std::vector<std::string> errors;
  std::vector<std::string> restart_needed;
};

// What the admin listener may know of the process, from its own thread: the layer
// above (app) implements it over thread-safe state only (the workers' atomics, the
// current snapshot), so the admin never touches a worker's objects.
class status_source {
 public:
  virtual ~status_source() = default;
  // The configuration in effect (never null once the server runs).
  virtual config::snapshot current_config() const = 0;
  // The consumer files of its plans (read with it).
  virtual std::shared_ptr<const limit::consumer_maps> consumers() const { return nullptr; }
  virtual readiness ready() const = 0;
  // Every upstream's servers and their health (GET /upstreams), as the workers share them.
  virtual std::shared_ptr<const upstream::server_set> upstream_servers() const = 0;
  // The Prometheus text of the process' counters, gathered now.
  virtual std::string metrics() const = 0;
  // Reloads the configuration file (POST /reload) away from the caller's thread: `done`
  // runs on another thread once the workers use it (or it was rejected).
  virtual void reload(std::function<void(reload_outcome)> done) = 0;
};

}  // namespace fg::admin
