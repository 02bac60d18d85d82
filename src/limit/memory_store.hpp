#pragma once
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "limit/algorithms.hpp"
#include "limit/decision.hpp"

namespace fg::limit {

// The embedded store: every algorithm in process, shared by all workers. Keys expire
// like Redis keys and are reclaimed; the number of keys is capped (a new key past the
// cap is an error, so the route's on_store_error applies, and a log line says so).
class memory_store {
 public:
  explicit memory_store(std::size_t max_keys = 1'000'000);

  enum class result { ok, full };
  // All checks are evaluated together: if one that is not in shadow mode denies,
  // nothing is recorded for any; otherwise every admitting check is recorded.
  // `now` in milliseconds (monotonic). Thread-safe.
  result evaluate(std::span<const check> checks, std::span<decision> out, std::int64_t now, std::uint64_t lease);
  void release(const std::string& key, std::uint64_t lease);

  std::size_t size() const;
  static std::int64_t now_ms();

 private:
  static constexpr std::size_t shard_count = 64;
  struct shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, key_state> map;
    std::int64_t next_sweep = 0;
  };
  std::size_t shard_of(const std::string& key) const;
  // Erases expired keys, except those in `keep` (states the caller still points to).
  void sweep(shard& s, std::int64_t now, std::span<key_state* const> keep = {});

  std::vector<shard> shards_;
  std::size_t max_per_shard_;
};

}  // namespace fg::limit
