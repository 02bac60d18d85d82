#pragma once
#include <cstdint>
#include <string>

namespace fg::config {
struct limit_config;
}

namespace fg::limit {

// The clock every decision is read on: steady, in ms.
std::int64_t now_ms();

// One limit to evaluate for one request.
struct check {
  const config::limit_config* cfg = nullptr;
  std::string key;
  std::uint64_t cost = 1;
};

// What one limit says about one request. Times are milliseconds from now.
struct decision {
  bool allowed = true;
  std::uint64_t limit = 0;      // quota (limit, or burst for rate-based algorithms)
  std::uint64_t remaining = 0;  // quota left after this request (if allowed)
  std::int64_t reset_ms = 0;    // until the quota is whole again / the window ends
  std::int64_t retry_ms = 0;    // when denied: until a retry can succeed; when allowed by
                                // on_exceed: delay: how long it waits for its turn
};

}  // namespace fg::limit
