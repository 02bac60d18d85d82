#include "store/memory_store.hpp"

#include <boost/container/small_vector.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <functional>

namespace fg::store {

namespace {

// Per-call scratch of a decision, one entry per check: a route has a handful of limits,
// so these stay on the stack (a decision allocates nothing; four heap vectors a call
// cost ~250 instructions a request, callgrind).
template <class T>
using per_check = boost::container::small_vector<T, 4>;

// The shard indexes `idx` sorted and unique: the order to lock them in (no deadlock).
per_check<std::size_t> lock_order(per_check<std::size_t> idx) {
  std::sort(idx.begin(), idx.end());
  idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
  return idx;
}

}  // namespace

template <class Keys, class Indexes>
void memory_store::hash_keys(std::span<const check> checks, Keys& keys, Indexes& idx) {
  for (const auto& c : checks) {
    keys.push_back(hashed_of(c.key));
    idx.push_back(shard_index(keys.back()));
  }
}

memory_store::memory_store(std::size_t max_keys)
    : shards_(shard_count), max_per_shard_(std::max<std::size_t>(1, max_keys / shard_count)) {}

memory_store::hashed memory_store::hashed_of(std::string_view key) {
  return {key, std::hash<std::string_view>{}(key)};
}

void memory_store::erase(shard& s, std::list<entry>::iterator it) {
  s.map.erase(hashed_of(it->key));
  s.lru.erase(it);
}

void memory_store::sweep(shard& s, std::int64_t now, std::span<key_state* const> keep) {
  for (auto it = s.lru.begin(); it != s.lru.end();) {
    auto next = std::next(it);
    if (it->state.expires_at <= now && std::find(keep.begin(), keep.end(), &it->state) == keep.end()) erase(s, it);
    it = next;
  }
  s.next_sweep = now + 1000;
}

void memory_store::note_eviction(std::int64_t now) {
  evicted_total_.fetch_add(1, std::memory_order_relaxed);
  if (auto evicted = evicted_.add(now))
    spdlog::warn("memory store under key pressure ({} keys per shard, {} shards): {} live key(s) evicted, least "
                 "recently used first, since the last report",
                 max_per_shard_, shard_count, evicted);
}

key_state& memory_store::touch(shard& s, const hashed& key, std::int64_t now, std::span<key_state* const> keep) {
  if (auto it = s.map.find(key); it != s.map.end()) {
    s.lru.splice(s.lru.begin(), s.lru, it->second);
    return it->second->state;
  }
  if (s.map.size() >= max_per_shard_) {
    // Expired keys first (at most one full pass per second), then the least recently used.
    if (now >= s.next_sweep) sweep(s, now, keep);
    for (auto it = s.lru.end(); s.map.size() >= max_per_shard_ && it != s.lru.begin();) {
      --it;
      if (std::find(keep.begin(), keep.end(), &it->state) != keep.end()) continue;
      // A key holding live concurrency leases is not forgotten: its requests are in flight.
      if (std::any_of(it->state.leases.begin(), it->state.leases.end(), [&](const auto& l) { return l.second > now; }))
        continue;
      auto victim = it++;
      if (victim->state.expires_at > now) note_eviction(now);
      erase(s, victim);
    }
  }
  s.lru.push_front(entry{std::string(key.key), key_state{}});
  s.map.emplace(hashed{s.lru.front().key, key.hash}, s.lru.begin());
  return s.lru.front().state;
}

void memory_store::peek(std::span<const check> checks, std::span<decision> out, std::int64_t now) const {
  per_check<hashed> keys;
  per_check<std::size_t> idx;
  hash_keys(checks, keys, idx);
  per_check<std::unique_lock<std::mutex>> locks;
  for (auto i : lock_order(idx)) locks.emplace_back(shards_[i].mu);
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const auto& sh = shards_[idx[i]];
    auto it = sh.map.find(keys[i]);
    // A copy: evaluating without commit still drops expired entries from the state.
    key_state s = it == sh.map.end() ? key_state{} : it->second->state;
    out[i] = limit::evaluate(*checks[i].cfg, s, now, checks[i].cost, false);
  }
}

memory_store::result memory_store::evaluate(std::span<const check> checks, std::span<decision> out, std::int64_t now,
                                            std::uint64_t lease) {
  if (checks.size() == 1) {
    // One limit (most routes): one lock, one evaluation. Committing at once is the same
    // as looking first: an algorithm's decision does not depend on `commit`, and a
    // denial records nothing.
    const auto key = hashed_of(checks[0].key);
    auto& sh = shard_of(key);
    std::lock_guard lock(sh.mu);
    out[0] = limit::evaluate(*checks[0].cfg, touch(sh, key, now, {}), now, checks[0].cost, true, lease);
    if (now >= sh.next_sweep) sweep(sh, now);
    return result::ok;
  }
  // Lock every shard involved, in index order (no deadlock), so the checks are one step.
  per_check<hashed> keys;
  per_check<std::size_t> idx;
  hash_keys(checks, keys, idx);
  const auto order = lock_order(idx);
  per_check<std::unique_lock<std::mutex>> locks;
  for (auto i : order) locks.emplace_back(shards_[i].mu);

  per_check<key_state*> states(checks.size());
  for (std::size_t i = 0; i < checks.size(); ++i)
    // Keys this call already holds (expired or just created) must survive a sweep.
    states[i] = &touch(shards_[idx[i]], keys[i], now, std::span<key_state* const>(states.data(), i));
  bool blocked = false;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    out[i] = limit::evaluate(*checks[i].cfg, *states[i], now, checks[i].cost, false, lease);
    if (!out[i].allowed && !checks[i].cfg->shadow) blocked = true;
  }
  if (!blocked) {
    for (std::size_t i = 0; i < checks.size(); ++i)
      if (out[i].allowed) limit::evaluate(*checks[i].cfg, *states[i], now, checks[i].cost, true, lease);
  }
  for (auto i : order)
    if (now >= shards_[i].next_sweep) sweep(shards_[i], now);
  return result::ok;
}

void memory_store::release(const std::string& key, std::uint64_t lease) {
  const auto k = hashed_of(key);
  auto& sh = shard_of(k);
  std::lock_guard lock(sh.mu);
  auto it = sh.map.find(k);
  if (it != sh.map.end()) release_lease(it->second->state, lease);
}

void memory_store::erase(const std::string& key) {
  const auto k = hashed_of(key);
  auto& sh = shard_of(k);
  std::lock_guard lock(sh.mu);
  auto it = sh.map.find(k);
  if (it != sh.map.end()) erase(sh, it->second);
}

void memory_store::charge(const check& c, std::uint64_t amount, std::int64_t now) {
  const auto k = hashed_of(c.key);
  auto& sh = shard_of(k);
  std::lock_guard lock(sh.mu);
  limit::charge(*c.cfg, touch(sh, k, now, {}), now, amount);
}

void memory_store::give(const check& c, std::uint64_t amount, std::int64_t now) {
  const auto k = hashed_of(c.key);
  auto& sh = shard_of(k);
  std::lock_guard lock(sh.mu);
  auto it = sh.map.find(k);
  if (it != sh.map.end()) limit::give(*c.cfg, it->second->state, now, amount);
}

void memory_store::renew(const std::string& key, std::uint64_t lease, std::int64_t now, std::int64_t lifetime_ms) {
  const auto k = hashed_of(key);
  auto& sh = shard_of(k);
  std::lock_guard lock(sh.mu);
  auto it = sh.map.find(k);
  if (it == sh.map.end()) return;
  sh.lru.splice(sh.lru.begin(), sh.lru, it->second);
  auto& st = it->second->state;
  for (auto& [id, expiry] : st.leases)
    if (id == lease && expiry > now) {
      expiry = now + lifetime_ms;
      st.expires_at = std::max(st.expires_at, expiry);
    }
}

std::size_t memory_store::size() const {
  std::size_t n = 0;
  for (const auto& s : shards_) {
    std::lock_guard lock(s.mu);
    n += s.map.size();
  }
  return n;
}

}  // namespace fg::store
