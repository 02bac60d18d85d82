#pragma once
// Calendar windows (align: calendar): where a limit's current day, week (from Monday) or
// month ends in its time zone, and where the one after it ends, in epoch milliseconds.
// Midnight in the zone, DST and month lengths as the system's tz database has them.
#include <cstdint>

#include "config/config.hpp"

namespace fg::limit {

struct period_ends {
  std::int64_t current = 0;  // the end of the period `now` is in
  std::int64_t next = 0;     // the end of the one after it
};

// For a limit with `calendar` set, at `now_ms` (epoch). Cached per thread until the
// current period ends: a lookup is a few comparisons.
period_ends calendar_ends(const config::limit_config& l, std::int64_t now_ms);

// The system clock in epoch milliseconds (what calendar periods are read against).
std::int64_t epoch_ms();

}  // namespace fg::limit
