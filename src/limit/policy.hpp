#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "limit/decision_source.hpp"
#include "obs/logging.hpp"
#include "obs/metrics.hpp"

namespace fg::limit {

class deny_cache;

// The failure policy and what surrounds a store, in front of it (`inner`): the deny
// cache (`denies`, for a remote store: known denials are answered without asking it),
// the route's on_store_error (allow / deny / local: then `local` decides alone), shadow
// limits (logged, never enforced) and the rate-limited store-error log line. This is
// the decision source a worker's sessions ask. Per worker.
class policy final : public decision_source {
 public:
  // `lease_base`: lease ids start above it (unique across workers).
  policy(decision_source& inner, decision_source& local, deny_cache* denies, std::uint64_t lease_base);
  status start(limit_call& c) override;
  boost::asio::awaitable<std::tuple<boost::system::error_code>> wait(limit_call& c) override;
  status finish(limit_call& c, boost::system::error_code ec) override;
  // Leases are released and renewed through the call's holder, never the policy.
  void release(limit_call& c) override {}
  void renew(limit_call& c) override {}
  // To the store that decided (the memory store when the route fell back to it).
  void charge(const limit_call& c, std::size_t i, std::uint64_t amount) override;
  std::int64_t round_trip_ms() const override { return inner_.round_trip_ms(); }

  // Where the log lines go (spdlog by default; tests count them).
  using log_sink = std::function<void(const std::string&)>;
  void set_log(log_sink shadow, log_sink store_error);
  // Where decisions are counted (per worker; none: not counted).
  void set_metrics(obs::worker_metrics* m) { metrics_ = m; }

 private:
  status answered(limit_call& c, status s, bool local = false);
  void count(const limit_call& c, obs::outcome o) const;
  status from_cache(limit_call& c);
  status on_error(limit_call& c, const std::string& why);
  void remember_denials(const limit_call& c);

  decision_source& inner_;
  decision_source& local_;
  deny_cache* denies_;
  std::uint64_t next_lease_;
  obs::error_log_limiter error_log_;
  log_sink shadow_log_, error_log_sink_;
  obs::worker_metrics* metrics_ = nullptr;
};

}  // namespace fg::limit
