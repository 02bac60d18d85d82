#pragma once
#include <boost/asio/any_io_executor.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "config/config.hpp"

namespace fg::redis {

// Where the connection goes. The one place that knows the deployment: standalone, or
// Sentinel (ask the sentinels for the master, redis/sentinel.hpp); Redis Cluster (seed
// nodes, then the slot map, MOVED/ASK) is to come behind the same seam.
class topology {
 public:
  virtual ~topology() = default;
  // The addresses to connect to, best first (standalone: the configured one; later
  // the sentinels' current master, or cluster seed nodes). Empty: nowhere to go.
  virtual std::vector<config::endpoint> seeds() const = 0;
  // The connection to `ep` failed or was lost (a sentinel topology asks again, a
  // cluster one refreshes its slot map).
  virtual void on_lost(const config::endpoint& ep) = 0;
  // Whether a new connection must check with ROLE that it reached a master.
  virtual bool verify_role() const { return false; }
  // `moved` is called when the connection should go elsewhere (the master moved).
  virtual void watch(std::function<void()> moved) {}
  virtual void stop() {}
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

// The topology for `cfg`: sentinel, or standalone (cluster mode too, until it exists:
// the first address).
std::unique_ptr<topology> make_topology(boost::asio::any_io_executor ex, const config::redis_config& cfg);

}  // namespace fg::redis
