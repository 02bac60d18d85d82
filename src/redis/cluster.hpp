#pragma once
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "config/config.hpp"
#include "redis/connection.hpp"
#include "redis/slots.hpp"

namespace fg::redis {

// What the cluster clients of the whole process saw (every worker's, the admin's), for
// the metrics.
struct cluster_events {
  static inline std::atomic<std::uint64_t> moved{0};         // MOVED followed
  static inline std::atomic<std::uint64_t> ask{0};           // ASK followed
  static inline std::atomic<std::uint64_t> refreshes{0};     // slot maps read and applied
  static inline std::atomic<std::uint64_t> refresh_failed{0};  // no node gave a usable map
  static inline std::atomic<std::uint64_t> try_again{0};     // TRYAGAIN answers (retried)
  static inline std::atomic<std::uint64_t> cluster_down{0};  // CLUSTERDOWN answers (store errors)
  static inline std::atomic<std::uint64_t> foreign_redirect{0};  // redirections to a non-node, not followed
};

// redis.mode: cluster. The slot map comes from CLUSTER SLOTS, asked of any node it knows
// (the masters' connections, else the seeds in redis.addresses); each master gets one
// connection (pipelined, as standalone's one). A call names its slot and goes to the
// slot's master: MOVED updates the slot at once, asks for a new map and retries there
// (up to 5 hops); ASK retries once at the named node after ASKING; TRYAGAIN (keys of a
// slot being moved) retries up to 3 times, 10, 20 and 40 ms later; CLUSTERDOWN fails
// the call (the route's on_store_error) and asks for a new map. Map refreshes are
// coalesced (one in flight, at most one every 100 ms) and happen on MOVED, on a lost
// connection, every 250 ms while some master is unreachable or a slot has no master,
// and every 5 s otherwise: a promoted replica is found with no manual step.
//
// Only nodes of the cluster are connected to (and sent the password): the seeds in
// redis.addresses, the masters and replicas of the last map a known node gave, and the
// nodes its CLUSTER NODES names (asked when a redirection names an address no map
// does: a master that serves no slot yet, the target of a reshard). A MOVED or ASK
// naming any other address is not followed: the call waits for a new map and node list
// (once) and goes where they say; a second such redirection fails it (a store error). A node that leaves the map is dropped (its number may be reused). Scripts
// load on every connect and again on NOSCRIPT (redis::connection). Per worker, on its
// executor; not thread-safe.
class cluster_client : public std::enable_shared_from_this<cluster_client> {
 public:
  using raw_completion = connection::raw_completion;
  using completion = connection::completion;
  cluster_client(boost::asio::any_io_executor ex, config::redis_config cfg, std::string script);
  ~cluster_client();
  void start();
  void stop();
  // Every slot has a master, and every master's connection is up.
  bool connected() const;
  // The masters serving slots, and how many of their connections are up.
  std::size_t masters() const { return masters_; }
  std::size_t masters_connected() const;
  // Each master serving slots ("host:port"), and whether its connection is up.
  std::vector<std::pair<std::string, bool>> master_states() const;
  // Which node serves `slot` now, as a small number stable for the client's life (for
  // batching by node); `npos` when none does.
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t node_of(std::uint16_t slot) const;
  // EVALSHA of the script on the slot's master, redirections followed (see above).
  // `done` is called once, on a connection's stack (as connection::eval's).
  void eval(std::uint16_t slot, std::size_t argc, std::string args, raw_completion done);
  // EVALSHA of the script on node `node` (node_of's number), as it is: no redirection
  // followed (keys carried in ARGV get a script error, not MOVED, from a node that does
  // not serve them). `done` as eval's.
  void eval_at(std::size_t node, std::size_t argc, std::string args, raw_completion done);
  // A new map soon (coalesced: one refresh in flight, at most one per 100 ms).
  void refresh_soon();
  // A plain command on the slot's master (no redirection followed); `done` is posted.
  void send(std::uint16_t slot, const std::vector<std::string>& args, completion done);

 private:
  struct node {
    config::endpoint address;
    std::shared_ptr<connection> conn;  // null once the node serves no slot
    bool serving = false;              // a master of some slot, as of the last map
    bool live = true;                  // false: a dropped node's free entry
  };
  struct call;
  // A started connection to `ep` (a master, or a seed).
  std::shared_ptr<connection> connect_to(const config::endpoint& ep);
  // Connections to the seeds in redis.addresses, for asking for the map.
  void start_seeds();
  std::size_t node_at(const config::endpoint& ep);
  void dispatch(std::shared_ptr<call> c, std::size_t target, bool asking);
  void on_reply(std::shared_ptr<call> c, std::size_t from, boost::system::error_code ec, const redisReply* r);
  void refresh();
  void refreshed(const reply& r, const config::endpoint& asked);
  // Whether `ep` is a seed or a node of the last map.
  bool known(const config::endpoint& ep) const;
  // A call redirected to an unknown address waits here for the next map.
  void park(std::shared_ptr<call> c);
  void release_parked();
  void drop(std::size_t i);
  void arm_tick();

  boost::asio::any_io_executor ex_;
  config::redis_config cfg_;
  std::string script_;
  std::vector<node> nodes_;                               // bounded: see node_at
  std::unordered_map<std::string, std::size_t> by_addr_;  // "host:port" -> nodes_ index
  std::vector<std::size_t> free_;                         // dropped entries of nodes_, for reuse
  std::unordered_set<std::string> known_;                 // "host:port" of the map's nodes
  std::unordered_set<std::string> confirmed_;             // and of CLUSTER NODES' (bounded: max_nodes)
  std::vector<std::shared_ptr<call>> parked_;             // bounded: max_parked
  std::vector<std::uint16_t> owner_;                      // per slot: nodes_ index, or no_owner
  static constexpr std::uint16_t no_owner = 0xffff;
  std::size_t masters_ = 0, covered_ = 0;
  std::vector<std::shared_ptr<connection>> seeds_;  // while no map is known, or no master answers
  bool refreshing_ = false, again_ = false, stopped_ = false;
  // A redirection named an unknown address: the next refresh asks CLUSTER NODES too
  // (a master that serves no slot yet, the target of a reshard, is in no slot map).
  bool want_nodes_ = false, nodes_pending_ = false;
  std::chrono::steady_clock::time_point last_refresh_{};
  std::size_t ask_next_ = 0;  // round robin over who is asked for the map
  boost::asio::steady_timer refresh_timer_, tick_;
  bool refresh_armed_ = false;
};

}  // namespace fg::redis
