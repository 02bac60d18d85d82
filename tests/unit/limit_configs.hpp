#pragma once
// The limits the limit tests configure: a count per window, or a rate with a burst.
#include <chrono>
#include <cstdint>
#include <string>

#include "config/config.hpp"

namespace fg::test {

inline config::limit_config windowed(config::algorithm algo, std::uint64_t limit, std::int64_t window_ms,
                                     std::string name = "l") {
  config::limit_config c;
  c.name = std::move(name);
  c.algo = algo;
  c.limit = limit;
  c.window = std::chrono::milliseconds(window_ms);
  return c;
}

inline config::limit_config rated(config::algorithm algo, std::uint64_t count, std::int64_t per_ms,
                                  std::uint64_t burst, std::string name = "r") {
  config::limit_config c;
  c.name = std::move(name);
  c.algo = algo;
  c.rate_ = {count, std::chrono::milliseconds(per_ms)};
  c.burst = burst;
  return c;
}

}  // namespace fg::test
