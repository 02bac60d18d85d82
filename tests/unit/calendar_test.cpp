// Calendar windows: where a day, a week and a month end in a time zone, across DST
// changes and month ends; the memory store's fixed_window ending with its period.
#include <catch2/catch.hpp>

#include <date/date.h>

#include "limit/algorithms.hpp"
#include "limit/calendar.hpp"

namespace cfg = fg::config;
namespace lim = fg::limit;
using period = cfg::limit_config::period;

namespace {

// Epoch ms of a UTC civil time.
std::int64_t utc(int y, unsigned m, unsigned d, int hh = 0, int mm = 0, int ss = 0) {
  using namespace std::chrono;
  const auto day = date::sys_days(date::year(y) / m / d);
  return duration_cast<milliseconds>((day + hours(hh) + minutes(mm) + seconds(ss)).time_since_epoch()).count();
}

cfg::limit_config calendar(period p, std::string zone) {
  cfg::limit_config l;
  l.name = "quota";
  l.algo = cfg::algorithm::fixed_window;
  l.limit = 3;
  l.window = std::chrono::hours(24);
  l.calendar = p;
  l.timezone = std::move(zone);
  return l;
}

}  // namespace

TEST_CASE("calendar periods end at midnight in their zone", "[calendar]") {
  const auto day = calendar(period::day, "UTC");
  auto e = lim::calendar_ends(day, utc(2026, 12, 4, 13, 5));
  CHECK(e.current == utc(2026, 12, 5));
  CHECK(e.next == utc(2026, 12, 6));
  // A Friday: the week ends on the next Monday's midnight.
  const auto week = calendar(period::week, "UTC");
  e = lim::calendar_ends(week, utc(2026, 12, 4, 13));
  CHECK(e.current == utc(2026, 12, 7));
  CHECK(e.next == utc(2026, 12, 14));
  // A Monday at 00:00 is in its own week.
  CHECK(lim::calendar_ends(week, utc(2026, 12, 7)).current == utc(2026, 12, 14));
  // Months: 31 days, February of a common year, the year's end.
  const auto month = calendar(period::month, "UTC");
  CHECK(lim::calendar_ends(month, utc(2026, 1, 31, 23, 59, 59)).current == utc(2026, 2, 1));
  e = lim::calendar_ends(month, utc(2026, 2, 10));
  CHECK(e.current == utc(2026, 3, 1));
  CHECK(e.next == utc(2026, 4, 1));
  CHECK(lim::calendar_ends(month, utc(2026, 12, 31, 12)).next == utc(2027, 2, 1));
}

TEST_CASE("calendar periods across DST changes and zones", "[calendar]") {
  // Europe/Berlin goes to CEST at 01:00 UTC on 2026-03-29: that day has 23 hours.
  const auto berlin = calendar(period::day, "Europe/Berlin");
  auto e = lim::calendar_ends(berlin, utc(2026, 3, 28, 23, 30));  // 00:30 CET on the 29th
  CHECK(e.current == utc(2026, 3, 29, 22));                        // midnight CEST
  CHECK(e.next == utc(2026, 3, 30, 22));
  CHECK(e.current - utc(2026, 3, 28, 23) == 23 * 3'600'000);
  // And back to CET on 2026-10-25: a day of 25 hours.
  e = lim::calendar_ends(berlin, utc(2026, 10, 24, 23));
  CHECK(e.current == utc(2026, 10, 25, 23));
  // A month in Berlin ends at its local midnight: 22:00 UTC in summer.
  CHECK(lim::calendar_ends(calendar(period::month, "Europe/Berlin"), utc(2026, 3, 31, 21, 59)).current ==
        utc(2026, 3, 31, 22));
  // New York: 05:00 UTC in winter.
  CHECK(lim::calendar_ends(calendar(period::day, "America/New_York"), utc(2026, 12, 4, 12)).current ==
        utc(2026, 12, 5, 5));
}

TEST_CASE("the memory store's calendar window ends with its period", "[calendar]") {
  auto l = calendar(period::day, "UTC");
  lim::key_state s;
  const std::int64_t now = 1'000'000;  // the steady clock
  auto d = lim::evaluate(l, s, now, 1, true);
  CHECK(d.allowed);
  const auto sys = lim::epoch_ms();
  const auto want = lim::calendar_ends(l, sys).current - sys;
  // (the two clocks are read a moment apart)
  CHECK(d.reset_ms >= want - 50);
  CHECK(d.reset_ms <= want + 50);
  CHECK(s.expires_at == now + d.reset_ms);
  CHECK(lim::evaluate(l, s, now + 1, 2, true).allowed);
  auto denied = lim::evaluate(l, s, now + 2, 1, true);
  CHECK_FALSE(denied.allowed);
  CHECK(denied.retry_ms == d.reset_ms - 2);
}
