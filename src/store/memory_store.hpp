#pragma once
#include <boost/intrusive/list.hpp>

#include <atomic>
#include <cstdint>
#include <limits>
#include <list>
#include <map>
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
// like Redis keys and are reclaimed. The number of keys is capped: under key pressure a
// new key takes the place of an expired one, else of the least recently used one, so
// limiting goes on for everyone (an evicted key's client starts afresh: an early
// forgotten denial admits that one client, never all), and memory stays bounded by the
// cap. Evictions are logged once per interval.
//
// No call does work that grows with the store: keys are in shards of at most
// max_shard_keys (64 shards, more for a larger cap), each with an index of its keys by
// when they expire (slots of 1,024 ms, earliest first), so an expired key is found
// without a walk; each call sweeps at most sweep_budget of them; a shard's map gives
// back its buckets when it drains.
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
  // The shards' hash buckets, all together (a drained shard gives its back).
  std::size_t buckets() const;
  std::size_t shards() const { return shards_.size(); }
  // The shard `key` is in (for tests that fill one).
  std::size_t shard_of_key(std::string_view key) const { return shard_index(hashed_of(key)); }

  // A shard holds at most this many keys (a larger cap takes more shards), so that what
  // is done to a whole shard (its map growing or shrinking) stays short.
  static constexpr std::size_t max_shard_keys = 4096;
  // A call sweeps at most this many expired keys (of wholly past slots); past it, the next
  // call goes on.
  static constexpr std::size_t sweep_budget = 2;
  // The expiry index's slot width, as a shift of milliseconds (1,024 ms).
  static constexpr int slot_shift = 10;
  // Keys evicted before they expired, since the start.
  std::uint64_t evictions() const { return evicted_total_.load(std::memory_order_relaxed); }

 private:
  using expiry_hook = boost::intrusive::list_member_hook<boost::intrusive::link_mode<boost::intrusive::normal_link>>;
  static constexpr std::int64_t unindexed = -1;
  struct entry {
    std::string key;
    key_state state;
    // Its place in the shard's expiry index: the slot of state.expires_at it is listed in.
    expiry_hook in_slot;
    std::int64_t slot = unindexed;
  };
  using slot_list = boost::intrusive::list<entry, boost::intrusive::member_hook<entry, expiry_hook, &entry::in_slot>,
                                           boost::intrusive::constant_time_size<false>>;
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
    // The keys by the slot their expiry falls in, earliest first (a slot's list unordered).
    std::map<std::int64_t, slot_list> expiry;
    // When its earliest slot is wholly past (a sweep has work), kept beside the lock so
    // that a decision reads no node of `expiry` to know; none: the far future.
    std::int64_t sweep_at = std::numeric_limits<std::int64_t>::max();
  };
  static hashed hashed_of(std::string_view key);
  std::size_t shard_index(const hashed& key) const { return key.hash & (shards_.size() - 1); }
  shard& shard_of(const hashed& key) { return shards_[shard_index(key)]; }
  // Each check's key hashed (into `keys`) and its shard's index (into `idx`), in order.
  template <class Keys, class Indexes>
  void hash_keys(std::span<const check> checks, Keys& keys, Indexes& idx) const;
  // The key's entry, created (making room if the shard is full) when absent; used now.
  entry& touch(shard& s, const hashed& key, std::int64_t now, std::span<entry* const> keep);
  // An expired key of the shard not in `keep`, found in the index's earliest slot; none: lru's end.
  std::list<entry>::iterator expired(shard& s, std::int64_t now, std::span<entry* const> keep);
  // Lists `e` in the slot of its expiry, if that changed (after its state did).
  static void index(shard& s, entry& e);
  static void unindex(shard& s, entry& e);
  // Erases up to sweep_budget expired keys, from the earliest slots wholly past (the
  // next call goes on where this one stopped).
  void sweep(shard& s, std::int64_t now);
  // Whether the shard's earliest slot is wholly past (a sweep has work).
  static bool due(const shard& s, std::int64_t now) { return s.sweep_at <= now; }
  static void note_earliest(shard& s) {
    s.sweep_at = s.expiry.empty() ? std::numeric_limits<std::int64_t>::max()
                                  : (s.expiry.begin()->first + 1) << slot_shift;
  }
  void erase(shard& s, std::list<entry>::iterator it);
  // Gives back a drained map's buckets (a shard's whole map, bounded by max_shard_keys).
  static void shrink(shard& s);
  void note_eviction(std::int64_t now);

  std::vector<shard> shards_;
  std::size_t max_per_shard_;
  std::atomic<std::uint64_t> evicted_total_{0};
  obs::periodic_count evicted_;  // reported once per 5 s at most
};

}  // namespace fg::store
