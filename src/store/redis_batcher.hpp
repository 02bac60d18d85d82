#pragma once
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "limit/decision.hpp"
#include "store/resend_queue.hpp"

namespace fg::redis { class connection; }
namespace fg::obs {
class worker_metrics;
enum class store_cause : unsigned;
}

namespace fg::store {

using limit::check;
using limit::decision;

// What a redis_source asks of Redis: the batched evaluation of a request's checks, and
// the plain commands (a lease's release or renewal) on the server of one key.
class redis_evaluator {
 public:
  virtual ~redis_evaluator() = default;
  // Evaluates `checks` (which, like `nonce` and `out`, must live until completion);
  // `out` (one decision per check) is filled before completion.
  virtual boost::asio::awaitable<std::tuple<boost::system::error_code>> evaluate(std::span<const check> checks,
                                                                                 std::string_view nonce,
                                                                                 std::span<decision> out) = 0;
  // A command about `key`, its answer not waited for.
  virtual void send(std::string_view key, const std::vector<std::string>& args) = 0;
  // The same for a command that changes nothing when it runs twice (a lease's ZREM): if
  // the connection is down or its answer is lost, it is kept and sent again once calls
  // go (resend_queue).
  virtual void send_idempotent(std::string_view key, const std::vector<std::string>& args) = 0;
  // A post-charge of `c.cost` to `c.key` (the script's charge mode), not waited for.
  virtual void charge(const check& c) = 0;
  // The number (from 0) that names check `i`'s entries in its key (lease_member).
  virtual std::size_t member_index(std::span<const check> checks, std::size_t i) const { return i; }
  // The recent round trip of a call (send to answer), in whole ms rounded up.
  virtual std::int64_t round_trip_ms() const = 0;
  // Where calls and their failures are counted (none: not counted).
  virtual void set_metrics(obs::worker_metrics* m) = 0;
};

// Batches the limit checks of concurrent requests on one worker into one script call,
// so that Redis runs the script once for many requests: the requests that become
// ready in one turn of the event loop, or while the previous call is in flight, up
// to `max_batch` (a full batch goes at once). Each request's limits stay atomic in the
// script. Per worker.
class redis_batcher final : public redis_evaluator {
 public:
  // Runs `resume(arg)`, which resumes the `n` requests one reply answered, inside
  // whatever scope the owner wants around them (the worker sends their upstream writes
  // together: upstream/send_batch.hpp). Without one, they just resume.
  using resume_scope = void (*)(std::size_t n, void (*resume)(void*), void* arg);
  redis_batcher(boost::asio::any_io_executor ex, std::shared_ptr<redis::connection> c, std::size_t max_batch = 128,
                resume_scope scope = nullptr);
  ~redis_batcher() override;
  boost::asio::awaitable<std::tuple<boost::system::error_code>> evaluate(std::span<const check> checks,
                                                                         std::string_view nonce,
                                                                         std::span<decision> out) override;
  void send(std::string_view key, const std::vector<std::string>& args) override;
  void send_idempotent(std::string_view key, const std::vector<std::string>& args) override;
  void charge(const check& c) override;
  void set_metrics(obs::worker_metrics* m) override { metrics_ = m; }
  std::int64_t round_trip_ms() const override { return (flow_->rtt_us + 999) / 1000; }

 private:
  struct batch;
  // What a call's completion needs of its batcher, which may be gone by then.
  struct flow {
    redis_batcher* owner = nullptr;
    unsigned in_flight = 0;
    std::int64_t rtt_us = 0;  // moving average of the calls' round trips
    resend_queue unsent;
  };
  static constexpr unsigned max_in_flight = 1;
  void flush();
  void schedule_flush();
  // What send_idempotent kept, sent again ahead of the next call while connected.
  void resend();

  boost::asio::any_io_executor ex_;
  std::shared_ptr<redis::connection> conn_;
  std::size_t max_batch_;
  resume_scope scope_;
  obs::worker_metrics* metrics_ = nullptr;
  std::unique_ptr<batch> current_;
  bool flush_posted_ = false;
  std::shared_ptr<flow> flow_;
};
// The store error cause `ec` is counted under.
obs::store_cause cause_of(boost::system::error_code ec);
// A post-charge the store did not take: logged at most once a second.
void log_charge_failure(const std::string& why);

}  // namespace fg::store
