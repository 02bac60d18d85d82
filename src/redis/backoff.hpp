#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>

namespace fg::redis {

// Reconnect delays: exponential from `base` to `cap`, with "equal jitter" (half fixed,
// half random) so that many gateways do not reconnect in lockstep. Pure: the random
// number in [0, 1) is passed in.
class backoff {
 public:
  backoff(std::chrono::milliseconds base = std::chrono::milliseconds(50),
          std::chrono::milliseconds cap = std::chrono::milliseconds(2000))
      : base_(base), cap_(cap) {}
  std::chrono::milliseconds next(double random01) {
    auto exp = base_.count() << std::min(attempt_, 16u);
    auto ceiling = std::min<std::int64_t>(cap_.count(), exp);
    ++attempt_;
    return std::chrono::milliseconds(ceiling / 2 + static_cast<std::int64_t>(random01 * static_cast<double>(ceiling / 2)));
  }
  void reset() { attempt_ = 0; }
  unsigned attempts() const { return attempt_; }

 private:
  std::chrono::milliseconds base_, cap_;
  unsigned attempt_ = 0;
};

}  // namespace fg::redis
