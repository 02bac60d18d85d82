#include "limit/deny_cache.hpp"

namespace fg::limit {

std::int64_t deny_cache::denied_until(const std::string& key, const void* limit, std::uint64_t cost,
                                      std::int64_t now) {
  if (map_.empty()) return 0;  // the usual case: no hashing of the key
  auto it = map_.find(key);
  if (it == map_.end()) return 0;
  if (it->second.until <= now) {
    map_.erase(it);
    return 0;
  }
  return it->second.limit == limit && cost >= it->second.cost ? it->second.until : 0;
}

void deny_cache::remember(const std::string& key, const void* limit, std::uint64_t cost, std::int64_t until) {
  if (map_.size() >= max_) map_.clear();
  map_[key] = {limit, cost, until};
}

}  // namespace fg::limit
