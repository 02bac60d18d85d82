#pragma once
#include <atomic>
#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "limit/algorithms.hpp"
#include "limit/decision.hpp"
#include "obs/logging.hpp"

namespace fg::store {

using limit::check;
using limit::decision;
using limit::key_state;

// The embedded store: every algorithm in process, shared by all workers. Keys expire
// like Redis keys and are reclaimed. The number of keys is capped (per shard, the cap
// / 64): under key pressure a new key takes the place of an expired one, else of the
// least recently used one, so limiting goes on for everyone (an evicted key's client
// starts afresh: an early forgotten denial admits that one client, never all), and
// memory stays bounded by the cap. Evictions are logged once per interval.
class memory_store {
 public:
  explicit memory_store(std::size_t max_keys = 1'000'000);

  enum class result { ok };
  // All checks are evaluated together: if one that is not in shadow mode denies,
  // nothing is recorded for any; otherwise every admitting check is recorded.
  // `now` in milliseconds (monotonic). Thread-safe.
  result evaluate(std::span<const check> checks, std::span<decision> out, std::int64_t now, std::uint64_t lease);
  // What evaluate() would answer at `now`, recording nothing: no key created (one it
  // does not hold is as a new one), no state cleaned, no recency touched. Thread-safe.
  void peek(std::span<const check> checks, std::span<decision> out, std::int64_t now) const;
  void release(const std::string& key, std::uint64_t lease);
  // Forgets `key` (an admin's reset: its client starts afresh); its leases go with it.
  void erase(const std::string& key);
  // A post-charge of `amount` to the check's key (limit::charge), made if it is gone.
  void charge(const check& c, std::uint64_t amount, std::int64_t now);
  // Gives back up to `amount` of what the check's key used (limit::give), if it is held.
  void give(const check& c, std::uint64_t amount, std::int64_t now);
  // A held concurrency lease lives `lifetime_ms` from `now` again (a long tunnel).
  void renew(const std::string& key, std::uint64_t lease, std::int64_t now, std::int64_t lifetime_ms);

  std::size_t size() const;
  // Keys evicted before they expired, since the start.
  std::uint64_t evictions() const { return evicted_total_.load(std::memory_order_relaxed); }

 private:
  static constexpr std::size_t shard_count = 64;
  struct entry {
    std::string key;
    key_state state;
  };
  // A key with its hash, computed once per call: the shard is chosen by it and the
  // shard's map finds the key by it (hashing a key twice cost ~70 instructions).
  struct hashed {
    std::string_view key;
    std::size_t hash;
    bool operator==(const hashed& o) const { return key == o.key; }
  };
  struct hash_of {
    std::size_t operator()(const hashed& h) const noexcept { return h.hash; }
  };
  struct shard {
    mutable std::mutex mu;
    std::list<entry> lru;  // most recently used first
    std::unordered_map<hashed, std::list<entry>::iterator, hash_of> map;  // views into lru's keys
    std::int64_t next_sweep = 0;
  };
  static hashed hashed_of(std::string_view key);
  static std::size_t shard_index(const hashed& key) { return key.hash % shard_count; }
  shard& shard_of(const hashed& key) { return shards_[shard_index(key)]; }
  // Each check's key hashed (into `keys`) and its shard's index (into `idx`), in order.
  template <class Keys, class Indexes>
  static void hash_keys(std::span<const check> checks, Keys& keys, Indexes& idx);
  // The key's state, created (making room if the shard is full) when absent; used now.
  key_state& touch(shard& s, const hashed& key, std::int64_t now, std::span<key_state* const> keep);
  // Erases expired keys, except those in `keep` (states the caller still points to).
  void sweep(shard& s, std::int64_t now, std::span<key_state* const> keep = {});
  void erase(shard& s, std::list<entry>::iterator it);
  void note_eviction(std::int64_t now);

  std::vector<shard> shards_;
  std::size_t max_per_shard_;
  std::atomic<std::uint64_t> evicted_total_{0};
  obs::periodic_count evicted_;  // reported once per 5 s at most
};

}  // namespace fg::store
