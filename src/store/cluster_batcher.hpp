#pragma once
#include <boost/asio/any_completion_handler.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "store/redis_batcher.hpp"
#include "store/script_call.hpp"
#include "limit/deny_cache.hpp"

namespace fg::redis { class cluster_client; }

namespace fg::store {

// redis_batcher's counterpart on a Redis Cluster. The requests of one event-loop turn
// are grouped by master (the slot map says which): one call per master, one round in
// flight per master (the rule of redis_batcher's one connection), the next gathering
// meanwhile. A call whose keys are all in one slot declares them (KEYS), and MOVED/ASK
// are followed; one with keys of several slots carries them in ARGV (Redis refuses
// declared keys of different slots; the script's allow-cross-slot-keys flag lets it
// touch them), and if the master no longer serves them all (a stale map, a slot being
// moved) the script fails before writing anything and the requests go again, one call
// per slot. A request whose limits share a slot (keys are "{route:identity}:limit", so
// a route's limits on one identity do) is decided atomically, as on one Redis. One
// whose limits span slots (a per-IP limit beside a global one) is decided slot by slot,
// and if a limit not in shadow mode denies, or a slot's call fails, what the other
// slots admitted is given back (a refund call: the script's inverse of each algorithm).
// The worst case: never an admission past a limit; for about one round trip a refunded
// amount is held, so that another request may be denied that would have been admitted;
// a gateway that dies between the two calls leaves what it took to expire with its
// window. Per worker.
class cluster_batcher final : public redis_evaluator {
 public:
  using resume_scope = redis_batcher::resume_scope;
  cluster_batcher(boost::asio::any_io_executor ex, std::shared_ptr<redis::cluster_client> c,
                  std::size_t max_batch = 128, resume_scope scope = nullptr);
  ~cluster_batcher() override;
  boost::asio::awaitable<std::tuple<boost::system::error_code>> evaluate(std::span<const check> checks,
                                                                         std::string_view nonce,
                                                                         std::span<decision> out) override;
  void send(std::string_view key, const std::vector<std::string>& args) override;
  void send_idempotent(std::string_view key, const std::vector<std::string>& args) override;
  void charge(const check& c) override;
  std::size_t member_index(std::span<const check> checks, std::size_t i) const override;
  void set_metrics(obs::worker_metrics* m) override { metrics_ = m; }
  std::int64_t round_trip_ms() const override;
  // Refund calls sent by every cluster batcher of the process (for the metrics).
  static inline std::atomic<std::uint64_t> refunds{0};
  // Calls for many slots of a master that went again slot by slot.
  static inline std::atomic<std::uint64_t> splits{0};

 private:
  struct batch;
  struct split;
  struct flow;
  using handler = boost::asio::any_completion_handler<void(boost::system::error_code)>;
  // Joins `checks` (all of slot `slot`) to that slot's open batch.
  void add(std::uint16_t slot, std::span<const check> checks, std::string_view nonce, std::span<decision> out,
           handler resume);
  void flush(std::size_t lane);
  void send_batch(std::size_t lane, std::unique_ptr<batch> b);
  // What send_idempotent kept, sent again ahead of the next call.
  void resend();
  void schedule_flush(std::size_t lane);
  void resend_by_slot(std::size_t lane, batch& b);
  void evaluate_split(std::span<const check> checks, std::string_view nonce, std::span<decision> out, handler resume);
  void refund(std::uint16_t slot, const std::vector<check>& checks, const std::vector<decision>& got,
              std::string_view nonce);

  boost::asio::any_io_executor ex_;
  std::shared_ptr<redis::cluster_client> client_;
  std::size_t max_batch_;
  resume_scope scope_;
  obs::worker_metrics* metrics_ = nullptr;
  // Per lane (a master, by cluster_client::node_of, + 1; lane 0 for slots no master
  // serves yet): the batch gathering.
  struct lane {
    std::unique_ptr<batch> open;
    bool posted = false;
  };
  std::vector<lane> lanes_;
  std::shared_ptr<flow> flow_;
};

}  // namespace fg::store
