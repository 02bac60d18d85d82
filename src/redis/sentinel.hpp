#pragma once
#include <boost/asio/any_io_executor.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "config/config.hpp"
#include "redis/topology.hpp"

namespace fg::redis {

// What the sentinel topologies of the whole process saw (every worker's, the admin's),
// for the metrics: the master they name changed (a failover followed), and a server
// named master answered ROLE as a replica.
struct sentinel_events {
  static inline std::atomic<std::uint64_t> master_changes{0};
  static inline std::atomic<std::uint64_t> not_master{0};
  static inline std::atomic<std::uint64_t> switch_master{0};  // +switch-master messages for our master
};

// redis.mode: sentinel. The master is whatever the sentinels in redis.addresses say
// `master_name` is (SENTINEL get-master-addr-by-name, asked of every sentinel connected;
// the address is taken only when they agree: all that answered, or at least
// redis.sentinel_quorum of them; else the master stays what it was), asked at the start, again at once when the connection to the master is
// lost or the server says it is not a master (ROLE, on every connect), and every 500
// ms while connected, and at once when a sentinel publishes +switch-master for it (each
// sentinel has a subscriber connection too), so that a failover (SENTINEL FAILOVER, or
// a master that died) is followed at once, within a poll at worst: the connection is
// told to move. Sentinels are reached
// with redis.sentinel_username / sentinel_password (the master with username /
// password). Per connection, on its executor.
class sentinel final : public topology {
 public:
  sentinel(boost::asio::any_io_executor ex, const config::redis_config& cfg);
  ~sentinel() override;
  std::vector<config::endpoint> seeds() const override;
  void on_lost(const config::endpoint& ep) override;
  bool verify_role() const override { return true; }
  void watch(std::function<void()> moved) override;
  void stop() override;

 private:
  struct state;
  std::shared_ptr<state> state_;
};

}  // namespace fg::redis
