#pragma once
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "obs/logging.hpp"
#include "redis/adapter.hpp"
#include "redis/command_fsm.hpp"
#include "redis/connect_fsm.hpp"
#include "redis/error.hpp"
#include "redis/liveness.hpp"
#include "redis/reply.hpp"
#include "redis/resp.hpp"
#include "redis/script.hpp"
#include "redis/topology.hpp"

struct redisAsyncContext;
struct redisReply;

namespace fg::redis {

// What the connections of the whole process saw (every worker's, the admin's), for the
// metrics: closed for want of an answer (redis/liveness.hpp), a connect not done in time.
struct connection_events {
  static inline std::atomic<std::uint64_t> stalled{0};
  static inline std::atomic<std::uint64_t> connect_timeouts{0};
};

// One Redis connection driven by a worker's event loop: hiredis' async API on our
// Asio adapter, many commands in flight (pipelined), a deadline per command (a late
// reply is discarded), AUTH/SELECT and script loading on every connect, reconnect
// with jittered exponential backoff. One that stops answering (no reply byte for
// redis.stall_timeout while something is awaited, an idle one PINGed every
// redis.ping_interval) is closed and made again (redis/liveness.hpp). What to do when is decided by connect_fsm and
// command_fsm; this class does the I/O. Not thread-safe: one per worker.
class connection : public std::enable_shared_from_this<connection> {
 public:
  using completion = std::function<void(boost::system::error_code, reply)>;
  // Sees hiredis' reply itself, valid only during the call (nullptr with an error), and
  // runs on the connection's own stack (in a hiredis callback or a timer): it must
  // not call back into this connection's owner synchronously (post instead).
  using raw_completion = std::function<void(boost::system::error_code, const redisReply*)>;

  connection(boost::asio::any_io_executor ex, config::redis_config cfg, std::string script);
  // The same, going where `where` says (a cluster's node: standalone of its address).
  connection(boost::asio::any_io_executor ex, config::redis_config cfg, std::string script,
             std::unique_ptr<topology> where);
  ~connection();
  void start();
  void stop();
  bool connected() const { return adapter_.context() != nullptr && fsm_.ready(); }

  // Sends a command; `done` is posted to the executor with the reply or an error
  // (not_connected at once when down, timeout after redis.timeout).
  void send(const std::vector<std::string>& args, completion done);
  boost::asio::awaitable<std::pair<boost::system::error_code, reply>> command(std::vector<std::string> args);
  // EVALSHA of the script, its `argc` arguments (numkeys, the keys, ARGV) already in RESP
  // form in `args` (bulk strings, see append_bulk); on NOSCRIPT, EVAL once (which loads
  // the script again). Never retried on timeout. `done` is called once.
  void eval(std::size_t argc, std::string args, raw_completion done);
  // The same after ASKING (a cluster's ASK redirection: this one command may use a slot
  // the node is importing). The two go out back to back; nothing comes between.
  void eval_asking(std::size_t argc, std::string args, raw_completion done);
  // Subscribes to `channel` on every connect, after the setup commands; `on_message`
  // gets each message's payload, on the connection's stack. Call before start(): the
  // connection then carries nothing else (a RESP2 subscriber).
  void subscribe(std::string channel, std::function<void(std::string_view)> on_message) {
    sub_channel_ = std::move(channel);
    on_message_ = std::move(on_message);
  }
  // Where it connects (or is connected) now.
  const config::endpoint& endpoint() const { return endpoint_; }

 private:
  struct pending {
    raw_completion done;
    std::chrono::steady_clock::time_point deadline;
    command_fsm fsm;
    std::size_t eval_argc = 0;  // an EVALSHA: its arguments, to send again as EVAL on NOSCRIPT
    std::string eval_args;
  };
  static void on_reply(redisAsyncContext* ac, void* r, void* privdata);
  static void on_connect(const redisAsyncContext* ac, int status);
  static void on_disconnect(const redisAsyncContext* ac, int status);
  static void on_message(redisAsyncContext* ac, void* r, void* privdata);

  // Does what the connect state machine asked for.
  void run(const connect_action& a);
  void connect();
  void connect_to(const std::string& ip);
  // Closes the connection to go elsewhere (the topology's next seed), logged with `why`.
  void move_on(const char* why);
  void queue_setup();
  void log_lost(const char* why);
  void arm_deadline_timer();
  // The liveness check: a tick every liveness::period() while a context exists.
  void arm_liveness();
  void on_live_tick();
  // An idle connection asks for an answer: PING, or on a subscriber SUBSCRIBE again.
  void probe();
  // No answer in time: the connection is freed (what waits fails) and made again.
  void close_stalled(std::chrono::steady_clock::time_point now);
  // A reply came: the first since the connect resets the reconnect backoff.
  void answered();
  bool awaiting() const { return !pending_.empty() || subscribing_; }
  void finish(pending* p, boost::system::error_code ec, const redisReply* r);
  // Queues the RESP command `cmd` for `p` (which it takes) once connected; false (p
  // deleted, done posted with not_connected) when down or hiredis refuses it.
  bool queue(const std::string& cmd, pending* p);
  // The same, before the connect completes too (the setup commands).
  bool submit(const std::string& cmd, pending* p);
  void fail_later(raw_completion done, boost::system::error_code ec);
  raw_completion post_copy(completion done) const;

  boost::asio::any_io_executor ex_;
  config::redis_config cfg_;
  script script_;
  std::unique_ptr<topology> topology_;
  config::endpoint endpoint_;  // the one connected (or being connected) to
  adapter adapter_;
  connect_fsm fsm_;
  std::deque<pending*> pending_;
  boost::asio::steady_timer deadline_timer_;
  bool deadline_armed_ = false;
  liveness live_;
  boost::asio::steady_timer live_timer_;
  bool live_armed_ = false;
  // A subscriber's SUBSCRIBE awaits its confirmation (it has no pending entry).
  bool subscribing_ = false;
  // Whether this connection answered since it connected (the backoff resets then).
  bool answered_ = false;
  // Why the connection is being closed by us, for on_disconnect's log line.
  const char* closing_why_ = nullptr;
  boost::asio::steady_timer reconnect_timer_;
  obs::error_log_limiter error_log_;
  std::string sub_channel_;
  std::function<void(std::string_view)> on_message_;
};

}  // namespace fg::redis
