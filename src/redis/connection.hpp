#pragma once
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "obs/logging.hpp"
#include "redis/backoff.hpp"
#include "redis/error.hpp"
#include "redis/reply.hpp"
#include "redis/resp.hpp"
#include "redis/script.hpp"

struct redisAsyncContext;
struct redisReply;

namespace fg::redis {

// One Redis connection driven by a worker's event loop: hiredis' async API with our
// own Asio adapter, many commands in flight (pipelined), a deadline per command
// (a late reply is discarded), AUTH/SELECT and script loading on every connect,
// reconnect with jittered exponential backoff. Not thread-safe: one per worker.
class connection : public std::enable_shared_from_this<connection> {
 public:
  using completion = std::function<void(boost::system::error_code, reply)>;
  // Sees hiredis' reply itself, valid only during the call (nullptr with an error), and
  // runs on the connection's own stack (in a hiredis callback or a timer): it must
  // not call back into this connection's owner synchronously (post instead).
  using raw_completion = std::function<void(boost::system::error_code, const redisReply*)>;

  connection(boost::asio::any_io_executor ex, config::redis_config cfg, std::string script);
  ~connection();
  void start();
  void stop();
  bool connected() const { return ac_ != nullptr && ready_; }

  // Sends a command; `done` is posted to the executor with the reply or an error
  // (not_connected at once when down, timeout after redis.timeout).
  void send(const std::vector<std::string>& args, completion done);
  boost::asio::awaitable<std::pair<boost::system::error_code, reply>> command(std::vector<std::string> args);
  // EVALSHA of the script, its `argc` arguments (numkeys, the keys, ARGV) already in RESP
  // form in `args` (bulk strings, see append_bulk); on NOSCRIPT, EVAL once (which loads
  // the script again). Never retried on timeout. `done` is called once.
  void eval(std::size_t argc, std::string args, raw_completion done);

 private:
  struct pending {
    raw_completion done;
    std::chrono::steady_clock::time_point deadline;
    bool finished = false;
    std::size_t eval_argc = 0;  // an EVALSHA: its arguments, to send again as EVAL on NOSCRIPT
    std::string eval_args;
  };
  static void on_reply(redisAsyncContext* ac, void* r, void* privdata);
  static void on_connect(const redisAsyncContext* ac, int status);
  static void on_disconnect(const redisAsyncContext* ac, int status);
  static void add_read(void* self);
  static void del_read(void* self);
  static void add_write(void* self);
  static void del_write(void* self);
  static void cleanup(void* self);

  void connect();
  void connect_to(const std::string& ip);
  void lost(const char* why);
  void schedule_reconnect();
  void wait_read();
  void write_soon();
  void wait_write();
  void arm_deadline_timer();
  void finish(pending* p, boost::system::error_code ec, const redisReply* r);
  // Queues the RESP command `cmd` for `p` (which it takes); false (p deleted, done not
  // called) when hiredis refuses it.
  bool queue(const std::string& cmd, pending* p);
  void fail_later(raw_completion done, boost::system::error_code ec);

  boost::asio::any_io_executor ex_;
  config::redis_config cfg_;
  script script_;
  redisAsyncContext* ac_ = nullptr;
  bool ready_ = false;  // connected (AUTH/SELECT queued ahead of everything else)
  bool stopped_ = false;
  boost::asio::posix::stream_descriptor sd_;
  bool want_read_ = false, want_write_ = false, reading_ = false, writing_ = false;
  std::deque<pending*> pending_;
  boost::asio::steady_timer deadline_timer_;
  bool deadline_armed_ = false;
  boost::asio::steady_timer reconnect_timer_;
  backoff backoff_;
  obs::error_log_limiter error_log_;
};

}  // namespace fg::redis
