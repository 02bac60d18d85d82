#pragma once
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <span>

#include "config/config.hpp"
#include "limit/decision.hpp"

#include "redis/reply.hpp"

struct redisReply;

namespace fg::redis {
class connection;
class cluster_client;
}

namespace fg::store {

using limit::check;
using limit::decision;

class memory_store;

// What the store would answer a request's checks now, read without consuming or writing
// anything: the admin's /limits ("why is this client getting 429s?").
class inspector {
 public:
  virtual ~inspector() = default;
  // `out` (one per check) gets the decisions the next request with these checks would
  // get, evaluated together as the store does; an error when the store cannot answer.
  // `cfg` (which `checks` point into) names the store.
  virtual boost::asio::awaitable<boost::system::error_code> peek(const config::config& cfg,
                                                                 std::span<const check> checks,
                                                                 std::span<decision> out) = 0;
  // Deletes the checks' keys (the admin's POST /limits/reset: a consumer starts afresh),
  // and records them where every gateway sharing the store reads them (resets_key), to
  // forget its cached denials of them.
  virtual boost::asio::awaitable<boost::system::error_code> reset(const config::config& cfg,
                                                                  std::span<const check> checks) = 0;
  // Gives each check's key back up to the check's cost of what it used (the admin's POST
  // /limits/grant: limit::give, the script's refund), and records the keys as reset does.
  // For config::takes_any_cost algorithms only.
  virtual boost::asio::awaitable<boost::system::error_code> grant(const config::config& cfg,
                                                                  std::span<const check> checks) = 0;
};

// Where a store's resets are recorded: a sorted set (redis.key_prefix + "{resets}", one
// slot on a cluster) of the keys reset in the last hour, by the Redis time of the reset,
// at most the last 1,000; every gateway's workers read it every 200 ms and forget their
// cached denials of the keys in it.
std::string resets_key(const config::config& cfg);

// The store that `cfg.store` names at each call (a reload may change it): the memory
// store's peek, or the limiter script as a dry run on a Redis connection of its own (a
// cluster client of its own on a cluster, one dry run per check: they may span slots) on
// `ex` (never a worker's), remade when the redis section changes. Not thread-safe: on
// `ex`'s thread only, which must run for the connection to live.
class store_inspector final : public inspector {
 public:
  store_inspector(boost::asio::any_io_executor ex, memory_store& memory, const config::config& initial);
  ~store_inspector() override;
  store_inspector(const store_inspector&) = delete;
  store_inspector& operator=(const store_inspector&) = delete;

  boost::asio::awaitable<boost::system::error_code> peek(const config::config& cfg, std::span<const check> checks,
                                                         std::span<decision> out) override;
  boost::asio::awaitable<boost::system::error_code> reset(const config::config& cfg,
                                                          std::span<const check> checks) override;
  boost::asio::awaitable<boost::system::error_code> grant(const config::config& cfg,
                                                          std::span<const check> checks) override;

 private:
  // Records the checks' keys in the store's resets (resets_key), by its own time.
  boost::asio::awaitable<boost::system::error_code> record_resets(const config::config& cfg,
                                                                  std::span<const check> checks);
  // One call of the limiter script on the server of `key`'s slot; `read` (in the reply's
  // callback) false: a protocol error.
  boost::asio::awaitable<boost::system::error_code> eval(std::string_view key, std::size_t argc, std::string args,
                                                         std::function<bool(const redisReply*)> read);
  // One refund call of `checks` (all in one slot on a cluster): lua/evaluate.lua's mode 2.
  boost::asio::awaitable<boost::system::error_code> refund(std::span<const check> checks);
  // Waits (up to the grace a new connection has) for the connection for `rc`.
  boost::asio::awaitable<void> connected_for(const config::redis_config& rc);
  // One command on the server of `key`'s slot (any server but a cluster's); its reply
  // into `out` if given.
  boost::asio::awaitable<boost::system::error_code> command(std::string_view key, std::vector<std::string> args,
                                                            redis::reply* out = nullptr);
  // Makes the connection (or cluster client) for `rc`, unless the one there serves it.
  void connect_for(const config::redis_config& rc);
  bool connected() const;
  boost::asio::awaitable<boost::system::error_code> peek_redis(const config::config& cfg,
                                                               std::span<const check> checks,
                                                               std::span<decision> out);
  // One dry-run call of `checks` (all in one slot on a cluster).
  boost::asio::awaitable<boost::system::error_code> dry_run(std::span<const check> checks, std::span<decision> out);

  boost::asio::any_io_executor ex_;
  memory_store& memory_;
  config::redis_config redis_cfg_;
  std::shared_ptr<redis::connection> conn_;
  std::shared_ptr<redis::cluster_client> cluster_;
  std::chrono::steady_clock::time_point conn_made_;
};

}  // namespace fg::store
