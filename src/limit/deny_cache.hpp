#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>

namespace fg::limit {

// Per-worker memory of recent denials: a key denied until T is denied locally until T
// without asking Redis (a flood from one client costs Redis nothing). Bounded.
class deny_cache {
 public:
  explicit deny_cache(std::size_t max_entries = 100'000) : max_(max_entries) {}
  // Until when a request of `cost` on `key` is known to be denied under the numbers of
  // `limit` (0: not known; a denial under another plan's numbers says nothing of these,
  // nor one of a higher cost of a cheaper request).
  std::int64_t denied_until(const std::string& key, const void* limit, std::uint64_t cost, std::int64_t now);
  void remember(const std::string& key, const void* limit, std::uint64_t cost, std::int64_t until);
  // Forgets every denial (a reload: a limit's numbers may have changed).
  void clear() { map_.clear(); }
  // Forgets the denial of `key` (an admin reset it, here or on another gateway).
  void forget(const std::string& key) { map_.erase(key); }

 private:
  struct denial {
    const void* limit;
    std::uint64_t cost;
    std::int64_t until;
  };
  std::unordered_map<std::string, denial> map_;
  std::size_t max_;
};

}  // namespace fg::limit
