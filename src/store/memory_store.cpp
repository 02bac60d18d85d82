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

// Shards enough that none holds more than max_shard_keys (64 at least, a power of two).
std::size_t shard_count_for(std::size_t max_keys) {
  std::size_t n = 64;
  while (max_keys / n > memory_store::max_shard_keys) n *= 2;
  return n;
}

}  // namespace

template <class Keys, class Indexes>
void memory_store::hash_keys(std::span<const check> checks, Keys& keys, Indexes& idx) const {
  for (const auto& c : checks) {
    keys.push_back(hashed_of(c.key));
    idx.push_back(shard_index(keys.back()));
  }
}

memory_store::memory_store(std::size_t max_keys)
    : shards_(shard_count_for(max_keys)), max_per_shard_(std::max<std::size_t>(1, max_keys / shards_.size())) {}

memory_store::hashed memory_store::hashed_of(std::string_view key) {
  return {key, std::hash<std::string_view>{}(key)};
}

void memory_store::erase(shard& s, std::list<entry>::iterator it) {
  unindex(s, *it);
  s.map.erase(hashed_of(it->key));
  s.lru.erase(it);
}

void memory_store::index(shard& s, entry& e) {
  const auto slot = std::max<std::int64_t>(0, e.state.expires_at) >> slot_shift;
  if (slot == e.slot) return;
  unindex(s, e);
  s.expiry[slot].push_back(e);
  e.slot = slot;
  if (((slot + 1) << slot_shift) < s.sweep_at) note_earliest(s);
}

void memory_store::unindex(shard& s, entry& e) {
  if (e.slot == unindexed) return;
  auto at = s.expiry.find(e.slot);
  at->second.erase(at->second.iterator_to(e));
  if (at->second.empty()) {
    const bool first = at == s.expiry.begin();
    s.expiry.erase(at);
    if (first) note_earliest(s);
  }
  e.slot = unindexed;
}

std::list<memory_store::entry>::iterator memory_store::expired(shard& s, std::int64_t now,
                                                                      std::span<entry* const> keep) {
  // A slot's keys all expire before any later slot's: only slots begun by now can hold
  // an expired key, and in one wholly past every key has. A slot begun but not past is
  // unordered: a few of its keys are looked at.
  int looked = 0;
  for (auto at = s.expiry.begin(); at != s.expiry.end() && (at->first << slot_shift) <= now; ++at)
    for (auto& e : at->second) {
      if (e.state.expires_at <= now && std::find(keep.begin(), keep.end(), &e) == keep.end())
        return s.map.find(hashed_of(e.key))->second;
      if (++looked == 16) return s.lru.end();
    }
  return s.lru.end();
}

void memory_store::sweep(shard& s, std::int64_t now) {
  for (std::size_t erased = 0; erased < sweep_budget && due(s, now); ++erased)
    erase(s, s.map.find(hashed_of(s.expiry.begin()->second.front().key))->second);
  shrink(s);
}

void memory_store::shrink(shard& s) {
  // (a quarter full at most, so that a shard hovering at one size does not rehash again and again)
  if (s.map.bucket_count() > 64 && s.map.size() * 4 < s.map.bucket_count()) s.map.rehash(s.map.size() * 2);
}

void memory_store::note_eviction(std::int64_t now) {
  evicted_total_.fetch_add(1, std::memory_order_relaxed);
  if (auto evicted = evicted_.add(now))
    spdlog::warn("memory store under key pressure ({} keys per shard, {} shards): {} live key(s) evicted, least "
                 "recently used first, since the last report",
                 max_per_shard_, shards_.size(), evicted);
}

memory_store::entry& memory_store::touch(shard& s, const hashed& key, std::int64_t now, std::span<entry* const> keep) {
  if (auto it = s.map.find(key); it != s.map.end()) {
    s.lru.splice(s.lru.begin(), s.lru, it->second);
    return *it->second;
  }
  // Full: an expired key's place first (found in the expiry index), then the least
  // recently used live one's.
  while (s.map.size() >= max_per_shard_) {
    auto victim = expired(s, now, keep);
    if (victim == s.lru.end()) break;
    erase(s, victim);
  }
  if (s.map.size() >= max_per_shard_) {
    for (auto it = s.lru.end(); s.map.size() >= max_per_shard_ && it != s.lru.begin();) {
      --it;
      if (std::find(keep.begin(), keep.end(), &*it) != keep.end()) continue;
      // A key holding live concurrency leases is not forgotten: its requests are in flight.
      if (std::any_of(it->state.leases.begin(), it->state.leases.end(), [&](const auto& l) { return l.second > now; }))
        continue;
      auto victim = it++;
      if (victim->state.expires_at > now) note_eviction(now);
      erase(s, victim);
    }
  }
  s.lru.emplace_front();
  s.lru.front().key = key.key;
  s.map.emplace(hashed{s.lru.front().key, key.hash}, s.lru.begin());
  return s.lru.front();
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
    auto& e = touch(sh, key, now, {});
    out[0] = limit::evaluate(*checks[0].cfg, e.state, now, checks[0].cost, true, lease);
    index(sh, e);
    if (due(sh, now)) sweep(sh, now);
    return result::ok;
  }
  // Lock every shard involved, in index order (no deadlock), so the checks are one step.
  per_check<hashed> keys;
  per_check<std::size_t> idx;
  hash_keys(checks, keys, idx);
  const auto order = lock_order(idx);
  per_check<std::unique_lock<std::mutex>> locks;
  for (auto i : order) locks.emplace_back(shards_[i].mu);

  per_check<entry*> entries(checks.size());
  for (std::size_t i = 0; i < checks.size(); ++i)
    // Keys this call already holds (expired or just created) must not make room for another.
    entries[i] = &touch(shards_[idx[i]], keys[i], now, std::span<entry* const>(entries.data(), i));
  bool blocked = false;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    out[i] = limit::evaluate(*checks[i].cfg, entries[i]->state, now, checks[i].cost, false, lease);
    if (!out[i].allowed && !checks[i].cfg->shadow) blocked = true;
  }
  if (!blocked) {
    for (std::size_t i = 0; i < checks.size(); ++i)
      if (out[i].allowed) limit::evaluate(*checks[i].cfg, entries[i]->state, now, checks[i].cost, true, lease);
  }
  for (std::size_t i = 0; i < checks.size(); ++i) index(shards_[idx[i]], *entries[i]);
  for (auto i : order)
    if (due(shards_[i], now)) sweep(shards_[i], now);
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
  auto& e = touch(sh, k, now, {});
  limit::charge(*c.cfg, e.state, now, amount);
  index(sh, e);
}

void memory_store::give(const check& c, std::uint64_t amount, std::int64_t now) {
  const auto k = hashed_of(c.key);
  auto& sh = shard_of(k);
  std::lock_guard lock(sh.mu);
  auto it = sh.map.find(k);
  if (it == sh.map.end()) return;
  limit::give(*c.cfg, it->second->state, now, amount);
  index(sh, *it->second);
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
  index(sh, *it->second);
}

std::size_t memory_store::buckets() const {
  std::size_t n = 0;
  for (const auto& s : shards_) {
    std::lock_guard lock(s.mu);
    n += s.map.bucket_count();
  }
  return n;
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
