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
  // Until when `key` is known to be denied (0: not known).
  std::int64_t denied_until(const std::string& key, std::int64_t now);
  void remember(const std::string& key, std::int64_t until);
  // Forgets every denial (a reload: a limit's numbers may have changed).
  void clear() { map_.clear(); }

 private:
  std::unordered_map<std::string, std::int64_t> map_;
  std::size_t max_;
};

}  // namespace fg::limit
