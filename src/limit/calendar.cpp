#include "limit/calendar.hpp"

#include <date/tz.h>

#include <array>
#include <chrono>
#include <string>

namespace fg::limit {

namespace {

using ms = std::chrono::milliseconds;
using period = config::limit_config::period;

// The local midnight that starts the period after the one `day` (a local day) is in.
date::local_days next_start(period p, date::local_days day) {
  switch (p) {
    case period::day:
      return day + date::days(1);
    case period::week: {
      const auto since_monday = (date::weekday(day) - date::Monday).count();
      return day - date::days(since_monday) + date::days(7);
    }
    case period::month: {
      const date::year_month_day ymd(day);
      return date::local_days((ymd.year() / ymd.month() / 1) + date::months(1));
    }
    case period::none:
      break;
  }
  return day + date::days(1);
}

std::int64_t to_epoch(const date::time_zone* tz, date::local_days start) {
  // (a midnight that does not exist, skipped by a DST change, is the change itself)
  const auto sys = tz->to_sys(date::local_time<ms>(start), date::choose::earliest);
  return sys.time_since_epoch().count();
}

period_ends compute(const config::limit_config& l, std::int64_t now_ms) {
  const date::time_zone* tz = nullptr;
  try {
    tz = date::locate_zone(l.timezone);
  } catch (const std::exception&) {
    tz = date::locate_zone("UTC");  // (the loader checked the name)
  }
  const date::sys_time<ms> now{ms(now_ms)};
  const auto today = date::floor<date::days>(tz->to_local(now));
  const auto first = next_start(l.calendar, today);
  return {to_epoch(tz, first), to_epoch(tz, next_start(l.calendar, first))};
}

struct cached {
  std::string zone;  // "" = unused
  period p = period::none;
  std::int64_t from = 0;  // valid for now in [from, ends.current)
  period_ends ends;
};

}  // namespace

std::int64_t epoch_ms() {
  return std::chrono::duration_cast<ms>(std::chrono::system_clock::now().time_since_epoch()).count();
}

period_ends calendar_ends(const config::limit_config& l, std::int64_t now_ms) {
  thread_local std::array<cached, 8> cache{};
  thread_local std::size_t next_slot = 0;
  for (auto& c : cache)
    if (!c.zone.empty() && c.p == l.calendar && c.zone == l.timezone && now_ms >= c.from && now_ms < c.ends.current)
      return c.ends;
  const auto ends = compute(l, now_ms);
  auto& c = cache[next_slot++ % cache.size()];
  c = {l.timezone, l.calendar, now_ms, ends};
  return ends;
}

}  // namespace fg::limit
