#pragma once
#include <span>
#include <string>
#include <vector>

#include "limit/decision.hpp"
#include "limit/memory_store.hpp"

namespace fg::redis { struct reply; }

namespace fg::limit {

// The KEYS and ARGV of one limiter-script call for `checks` (see lua/evaluate.lua).
void script_call(std::span<const check> checks, std::string_view nonce, std::vector<std::string>& keys,
                 std::vector<std::string>& args);
// Reads the script's reply into `out`; false when it is not what the script returns.
bool decode_reply(const redis::reply& r, std::span<decision> out);
// The member of a concurrency lease held for check `index` (0-based) of a call.
std::string lease_member(std::string_view nonce, std::size_t index);

// Per-worker memory of recent denials: a key denied until T is denied locally until T
// without asking Redis (a flood from one client costs Redis nothing). Bounded.
class deny_cache {
 public:
  explicit deny_cache(std::size_t max_entries = 100'000) : max_(max_entries) {}
  // Until when `key` is known to be denied (0: not known).
  std::int64_t denied_until(const std::string& key, std::int64_t now);
  void remember(const std::string& key, std::int64_t until);

 private:
  std::unordered_map<std::string, std::int64_t> map_;
  std::size_t max_;
};

}  // namespace fg::limit
