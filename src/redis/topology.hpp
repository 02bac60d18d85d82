#pragma once
#include <boost/asio/any_io_executor.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "config/config.hpp"

namespace fg::redis {

// Where one connection goes: standalone, or Sentinel (ask the sentinels for the master,
// redis/sentinel.hpp). Redis Cluster is not a topology: redis::cluster_client
// (redis/cluster.hpp) holds a connection per master, each on a standalone topology.
class topology {
 public:
  virtual ~topology() = default;
  // The addresses to connect to, best first (standalone: the configured one; Sentinel:
  // the master the sentinels agree on). Empty: nowhere to go.
  virtual std::vector<config::endpoint> seeds() const = 0;
  // The connection to `ep` failed or was lost (a sentinel topology asks again).
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

// The topology for `cfg`: sentinel, or standalone (the first of redis.addresses).
std::unique_ptr<topology> make_topology(boost::asio::any_io_executor ex, const config::redis_config& cfg);

}  // namespace fg::redis
