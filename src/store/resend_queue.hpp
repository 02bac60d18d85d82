#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace fg::store {

// Commands that must reach Redis and change nothing when sent twice (a lease's ZREM),
// which met a connection that was down, or lost their answer: kept, the oldest dropped
// past max_kept, and handed back to be sent again at most every retry_gap, so that a
// lease whose release the network lost is not held for its whole lifetime. Per worker,
// on its thread.
class resend_queue {
 public:
  static constexpr std::size_t max_kept = 4096;
  static constexpr std::chrono::milliseconds retry_gap{100};
  struct item {
    std::string key;
    std::vector<std::string> args;
  };

  void keep(std::string_view key, std::vector<std::string> args) {
    if (items_.size() == max_kept) {
      items_.pop_front();
      ++dropped_;
    }
    items_.push_back({std::string(key), std::move(args)});
  }
  // Everything kept, taken out to be sent again now, when it is time (at most every
  // retry_gap); what fails again is kept again.
  std::vector<item> due(std::chrono::steady_clock::time_point now) {
    if (items_.empty() || now < next_) return {};
    next_ = now + retry_gap;
    std::vector<item> out(std::make_move_iterator(items_.begin()), std::make_move_iterator(items_.end()));
    items_.clear();
    return out;
  }
  std::size_t size() const { return items_.size(); }
  std::uint64_t dropped() const { return dropped_; }

 private:
  std::deque<item> items_;
  std::chrono::steady_clock::time_point next_{};
  std::uint64_t dropped_ = 0;
};

}  // namespace fg::store
