#pragma once
#include <span>
#include <string>
#include <vector>

#include "limit/decision.hpp"
#include "limit/memory_store.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <functional>
#include <memory>
#include <tuple>

struct redisReply;
namespace fg::redis { class connection; }
namespace fg::obs {
class worker_metrics;
enum class store_cause : unsigned;
}

namespace fg::limit {

// One call of the limiter script (lua/evaluate.lua) for many requests: its arguments,
// and the reading of its reply. What requests share goes once per call: each limit's
// parameters (a spec), each list of limits a request has (a shape), and the requests
// themselves when they are alike (same shape, same keys, no nonce needed): one entry
// with a count, which the script decides exactly as if they had been sent one by one,
// and answers with runs of requests whose numbers move by a constant step.
class script_call {
 public:
  // Where a request's decisions are in the reply: its entry and its place in it.
  struct slot {
    std::size_t entry, ordinal;
  };
  slot add(std::span<const check> checks, std::string_view nonce);
  std::size_t requests() const { return requests_; }
  // What a call does (lua/evaluate.lua's flag): decide and record; a dry run, which
  // decides and records nothing (its requests must not be alike: one request, or ones
  // with different keys); a refund, which gives back what admitted requests took (each
  // check's cost of it; the requests added must not be alike either).
  enum class mode : std::int64_t { decide = 0, dry_run = 1, refund = 2 };
  // The script's arguments (numkeys, KEYS, ARGV) as RESP bulk strings, and their count.
  // With `keys_in_argv` the keys go last in ARGV, none in KEYS (a cluster node's call
  // for many slots: lua/evaluate.lua).
  std::pair<std::size_t, std::string> finish(mode m = mode::decide, bool keys_in_argv = false);
  std::pair<std::size_t, std::string> finish(bool dry_run) { return finish(dry_run ? mode::dry_run : mode::decide); }
  // After finish(), on the script's reply: finds each entry's runs; false when the reply
  // is not what the script returns for this call. The reply must outlive decisions().
  bool read(const redisReply* r);
  // After read(): the decisions of the request at `s` (whose checks are `checks`).
  void decisions(slot s, std::span<const check> checks, std::span<decision> out) const;

 private:
  struct entry {
    std::size_t shape;
    std::span<const check> checks;  // the first request's: its keys are the entry's
    std::string_view nonce;         // only for a shape that names entries (count 1)
    std::size_t hash;               // of the keys, to find alike requests quickly
    std::size_t count = 1;
    std::size_t runs = 0;           // after read(): where its runs start, in numbers
  };
  std::size_t spec_index(const check& c);
  std::size_t shape_index(std::span<const std::size_t> specs);
  std::int64_t number(std::size_t i) const;

  std::string specs_, shapes_;  // their parts of ARGV[1]
  std::vector<std::pair<const config::limit_config*, std::uint64_t>> spec_ids_;  // (limit, cost)
  std::vector<std::vector<std::size_t>> shape_ids_;
  std::vector<bool> shape_named_;
  std::vector<std::size_t> scratch_;
  std::vector<entry> entries_;
  std::size_t requests_ = 0;
  const unsigned char* reply_ = nullptr;
};

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
  void set_metrics(obs::worker_metrics* m) override { metrics_ = m; }
  std::int64_t round_trip_ms() const override { return (flow_->rtt_us + 999) / 1000; }

 private:
  struct batch;
  // What a call's completion needs of its batcher, which may be gone by then.
  struct flow {
    redis_batcher* owner = nullptr;
    unsigned in_flight = 0;
    std::int64_t rtt_us = 0;  // moving average of the calls' round trips
  };
  static constexpr unsigned max_in_flight = 1;
  void flush();
  void schedule_flush();

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
// The member of a concurrency lease held for check `index` (0-based) of a call.
std::string lease_member(std::string_view nonce, std::size_t index);

// Per-worker memory of recent denials: a key denied until T is denied locally until T
// without asking Redis (a flood from one client costs Redis nothing). Bounded.
class deny_cache {
 public:
  explicit deny_cache(std::size_t max_entries = 100'000) : max_(max_entries) {}
  // Until when `key` is known to be denied (0: not known).
  std::int64_t denied_until(const std::string& key, std::int64_t now);
  void remember(const std::string& key, std::int64_t until);
  // Forgets every denial (a reload: a limit's numbers may have changed).
  void clear() { map_.clear(); }

 private:
  std::unordered_map<std::string, std::int64_t> map_;
  std::size_t max_;
};

}  // namespace fg::limit
