#pragma once
#include <memory>
#include <vector>

#include "config/config.hpp"

namespace fg::redis {

// Where the connection goes. The one place that knows the deployment: standalone
// now; Redis Cluster (seed nodes, then the slot map, MOVED/ASK) and Sentinel (ask
// the sentinels for the master) are to come behind the same seam.
class topology {
 public:
  virtual ~topology() = default;
  // The addresses to connect to, best first (standalone: the configured one; later
  // the sentinels' current master, or cluster seed nodes). Empty: nowhere to go.
  virtual std::vector<config::endpoint> seeds() const = 0;
  // The connection to `ep` failed or was lost (a sentinel topology asks again, a
  // cluster one refreshes its slot map).
  virtual void on_lost(const config::endpoint& ep) = 0;
};

// One server: the first of redis.addresses.
class standalone final : public topology {
 public:
  explicit standalone(std::vector<config::endpoint> addresses) : addresses_(std::move(addresses)) {}
  std::vector<config::endpoint> seeds() const override;
  void on_lost(const config::endpoint&) override {}

 private:
  std::vector<config::endpoint> addresses_;
};

// The topology for `cfg`: standalone for every mode until cluster and sentinel exist.
std::unique_ptr<topology> make_topology(const config::redis_config& cfg);

}  // namespace fg::redis
