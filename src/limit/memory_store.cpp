#include "limit/memory_store.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>

namespace fg::limit {

memory_store::memory_store(std::size_t max_keys)
    : shards_(shard_count), max_per_shard_(std::max<std::size_t>(1, max_keys / shard_count)) {}

std::int64_t memory_store::now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::size_t memory_store::shard_of(const std::string& key) const { return std::hash<std::string>{}(key) % shard_count; }

void memory_store::sweep(shard& s, std::int64_t now, std::span<key_state* const> keep) {
  std::erase_if(s.map, [&](const auto& kv) {
    return kv.second.expires_at <= now && std::find(keep.begin(), keep.end(), &kv.second) == keep.end();
  });
  s.next_sweep = now + 1000;
}

memory_store::result memory_store::evaluate(std::span<const check> checks, std::span<decision> out, std::int64_t now,
                                            std::uint64_t lease) {
  // Lock every shard involved, in index order (no deadlock), so the checks are one step.
  std::vector<std::size_t> idx;
  idx.reserve(checks.size());
  for (const auto& c : checks) idx.push_back(shard_of(c.key));
  std::vector<std::size_t> order = idx;
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(order.size());
  for (auto i : order) locks.emplace_back(shards_[i].mu);

  std::vector<key_state*> states(checks.size());
  for (std::size_t i = 0; i < checks.size(); ++i) {
    auto& sh = shards_[idx[i]];
    auto it = sh.map.find(checks[i].key);
    if (it == sh.map.end()) {
      if (sh.map.size() >= max_per_shard_) {
        // Keys this call already holds (expired or just created) must survive the sweep.
        sweep(sh, now, std::span<key_state* const>(states.data(), i));
        if (sh.map.size() >= max_per_shard_) {
          static std::atomic<std::int64_t> last_log{0};
          if (now - last_log.exchange(now) > 5000)
            spdlog::warn("memory store full ({} keys per shard): new keys are refused", max_per_shard_);
          return result::full;
        }
      }
      it = sh.map.emplace(checks[i].key, key_state{}).first;
    }
    states[i] = &it->second;
  }
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
  auto& sh = shards_[shard_of(key)];
  std::lock_guard lock(sh.mu);
  auto it = sh.map.find(key);
  if (it != sh.map.end()) release_lease(it->second, lease);
}

std::size_t memory_store::size() const {
  std::size_t n = 0;
  for (const auto& s : shards_) {
    std::lock_guard lock(s.mu);
    n += s.map.size();
  }
  return n;
}

}  // namespace fg::limit
