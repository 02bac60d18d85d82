#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "config/config.hpp"

namespace fg::admin {

// How many calls of an expensive admin endpoint (/limits: a store read per limit) are
// admitted: a token bucket in total and one per peer address, each refilled at its
// configured rate with a burst of one period's calls. Pure (the caller gives the time);
// the per-peer table holds at most max_peers entries (full buckets are forgotten first,
// and past that every new peer shares one bucket).
class call_budget {
 public:
  using clock = std::chrono::steady_clock;
  static constexpr std::size_t max_peers = 1024;

  // Whether a call from `peer` at `now` is admitted (and counted).
  bool take(const std::string& peer, clock::time_point now, const config::admin_config& cfg) {
    refill(total_, cfg.limits_rate, now);
    auto* mine = bucket_for(peer, now, cfg);
    refill(*mine, cfg.limits_rate_per_peer, now);
    if (total_.tokens < 1.0 || mine->tokens < 1.0) {
      // Until both buckets hold a whole call again, in whole seconds (Retry-After).
      const double wait = std::max(seconds_to_one(total_, cfg.limits_rate), seconds_to_one(*mine, cfg.limits_rate_per_peer));
      wait_s_ = static_cast<unsigned>(std::max(1.0, std::ceil(wait)));
      return false;
    }
    total_.tokens -= 1.0;
    mine->tokens -= 1.0;
    return true;
  }
  std::size_t peers() const { return peers_.size(); }
  // After a refused take(): seconds until a call would be admitted (at least 1).
  unsigned wait_s() const { return wait_s_; }

 private:
  struct bucket {
    double tokens = -1;  // < 0: new, filled on first use
    clock::time_point at{};
  };
  static double per_second(const config::rate& r) {
    return static_cast<double>(r.count) * 1000.0 / static_cast<double>(std::max<std::int64_t>(1, r.per.count()));
  }
  static double seconds_to_one(const bucket& b, const config::rate& r) {
    return b.tokens >= 1.0 ? 0.0 : (1.0 - b.tokens) / per_second(r);
  }
  static void refill(bucket& b, const config::rate& r, clock::time_point now) {
    const double burst = static_cast<double>(r.count);
    if (b.tokens < 0) {
      b = {burst, now};
      return;
    }
    const double per_s = per_second(r);
    const double elapsed = std::chrono::duration<double>(now - b.at).count();
    b.tokens = std::min(burst, b.tokens + elapsed * per_s);
    b.at = now;
  }
  bucket* bucket_for(const std::string& peer, clock::time_point now, const config::admin_config& cfg) {
    if (auto it = peers_.find(peer); it != peers_.end()) return &it->second;
    if (peers_.size() >= max_peers) {
      for (auto it = peers_.begin(); it != peers_.end();) {
        refill(it->second, cfg.limits_rate_per_peer, now);
        if (it->second.tokens >= static_cast<double>(cfg.limits_rate_per_peer.count)) it = peers_.erase(it);
        else ++it;
      }
      if (peers_.size() >= max_peers) return &shared_;
    }
    return &peers_[peer];
  }

  bucket total_, shared_;
  unsigned wait_s_ = 1;
  std::unordered_map<std::string, bucket> peers_;
};

}  // namespace fg::admin
