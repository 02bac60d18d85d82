#include "limit/algorithms.hpp"

#include "limit/calendar.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace fg::limit {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

using config::algorithm;

// Rounded up to whole ms; saturated far beyond any window (a key deep in debt, a tiny
// rate), never past what an int64 holds.
std::int64_t ceil_ms(double v) {
  constexpr double most = 4.0e18;
  return static_cast<std::int64_t>(std::clamp(std::ceil(v - 1e-9), -most, most));
}

decision fixed_window(const config::limit_config& c, key_state& s, std::int64_t now, std::uint64_t cost, bool commit) {
  const auto w = c.window.count();
  // The window starts with the first admitted request and ends with the key (TTL); a
  // calendar window ends at its period's end, read on the system clock.
  const bool live = s.expires_at > now;
  std::int64_t end = live ? s.expires_at : now + w;
  if (!live && c.calendar != config::limit_config::period::none) {
    const auto sys = epoch_ms();
    end = now + (calendar_ends(c, sys).current - sys);
  }
  decision d;
  d.limit = c.limit;
  d.reset_ms = end - now;
  auto used = live ? static_cast<std::uint64_t>(s.count) : 0;
  if (used + cost > c.limit) {
    d.allowed = false;
    d.remaining = c.limit > used ? c.limit - used : 0;
    d.retry_ms = d.reset_ms;
    return d;
  }
  d.remaining = c.limit - used - cost;
  if (commit) {
    s.count = static_cast<std::int64_t>(used + cost);
    s.expires_at = end;
  }
  return d;
}

decision sliding_log(const config::limit_config& c, key_state& s, std::int64_t now, std::uint64_t cost, bool commit) {
  const auto w = c.window.count();
  auto& log = s.log;
  // A clock read before another request took the key (see sliding_window) counts as at
  // the newest entry: the log stays in order (the erase below searches it), and the key
  // does not expire before its newest entry leaves.
  if (!log.empty()) now = std::max(now, log.back());
  log.erase(log.begin(), std::upper_bound(log.begin(), log.end(), now - w));
  decision d;
  d.limit = c.limit;
  d.reset_ms = log.empty() ? 0 : log.front() + w - now;
  if (log.size() + cost > c.limit) {
    d.allowed = false;
    d.remaining = c.limit > log.size() ? c.limit - log.size() : 0;
    // The k-th oldest entry must leave before `cost` more fit.
    auto k = log.size() + cost - c.limit;
    d.retry_ms = k <= log.size() ? log[k - 1] + w - now : w;
    return d;
  }
  d.remaining = c.limit - log.size() - cost;
  // Whole again when the oldest entry (this one, if the log was empty) leaves.
  d.reset_ms = (log.empty() ? now : log.front()) + w - now;
  if (commit) {
    log.insert(log.end(), cost, now);
    s.expires_at = now + w;
  }
  return d;
}

decision sliding_window(const config::limit_config& c, key_state& s, std::int64_t now, std::uint64_t cost, bool commit) {
  const auto w = c.window.count();
  // Buckets start at the key's first request, not at the clock's: aligned to the clock,
  // a flood from idle met an empty previous bucket and got a whole limit at once in what
  // was left of the current one, then the next bucket's limit (up to 1.16x over 5 s).
  const bool live = s.expires_at > now && s.bucket >= 0;
  // A clock read before another request took the key (each worker reads the clock,
  // then waits for the store's lock) can be behind the bucket that request wrote. It
  // counts in that bucket, as at its start: taken for a bucket before it, it found no
  // count there and began the key afresh, with a whole limit again at a boundary (399
  // admitted where 320 were due over 3.2 s).
  if (live) now = std::max(now, s.origin + s.bucket * w);
  const std::int64_t origin = live ? s.origin : now;
  const auto idx = (now - origin) / w;
  const auto elapsed = (now - origin) % w;
  std::int64_t curr = 0, prev = 0;
  if (live && s.bucket == idx) curr = s.count, prev = s.previous;
  else if (live && s.bucket == idx - 1) prev = s.count;
  double weight = static_cast<double>(w - elapsed) / static_cast<double>(w);
  double estimate = static_cast<double>(prev) * weight + static_cast<double>(curr);
  decision d;
  d.limit = c.limit;
  d.reset_ms = w - elapsed;
  const double limit = static_cast<double>(c.limit);
  if (estimate + static_cast<double>(cost) > limit + 1e-9) {
    d.allowed = false;
    d.remaining = static_cast<std::uint64_t>(std::max(0.0, std::floor(limit - estimate)));
    // prev * (w - t) / w + curr + cost <= limit  =>  t >= w - (limit - curr - cost) * w / prev
    double room = limit - static_cast<double>(curr) - static_cast<double>(cost);
    if (prev > 0 && room >= 0) {
      double t = static_cast<double>(w) - room * static_cast<double>(w) / static_cast<double>(prev);
      d.retry_ms = std::max<std::int64_t>(1, ceil_ms(t - static_cast<double>(elapsed)));
    } else {
      d.retry_ms = w - elapsed;
    }
    return d;
  }
  d.remaining = static_cast<std::uint64_t>(std::max(0.0, std::floor(limit - estimate - static_cast<double>(cost))));
  if (commit) {
    s.bucket = idx;
    s.count = curr + static_cast<std::int64_t>(cost);
    s.previous = prev;
    s.origin = origin;
    s.expires_at = origin + (idx + 2) * w;
  }
  return d;
}

// on_exceed: delay: a request whose turn is `wait` ms away is admitted to wait for it.
bool delayable(const config::limit_config& c, double wait) {
  return c.max_delay.count() > 0 && wait <= static_cast<double>(c.max_delay.count()) + 1e-9;
}

// A request late for its turn by less than min(T, 2 ms) (T = 1/rate), behind a store
// round trip or a scheduler tick, keeps that turn's time: the limit's clock is not
// pushed back by the lateness, so a flood is admitted rate x time, not less by every
// turn's lateness (through Redis, a 1000/s limit with burst 1 admitted 0.67 of that).
// A client idle for longer gets no credit; two admissions are never closer than
// T - 2 ms beyond the burst.
constexpr double late_credit_ms = 2.0;
// Lateness `late` (> 0) behind a turn every `t` ms is credited.
bool credited(double late, double t) { return late < t - 1e-9 && late <= late_credit_ms + 1e-9; }

decision token_bucket(const config::limit_config& c, key_state& s, std::int64_t now, std::uint64_t cost, bool commit) {
  const double rate = static_cast<double>(c.rate_.count) / static_cast<double>(c.rate_.per.count());  // per ms
  const double burst = static_cast<double>(c.burst);
  double tokens = burst;
  double stamp = static_cast<double>(now);
  if (s.expires_at > now) {
    const double raw = s.tokens + (static_cast<double>(now) - s.stamp) * rate;
    tokens = std::min(burst, raw);
    // Full for less than the credit: the refill counts from when it became full.
    const double full_for = (raw - burst) / rate;
    if (full_for > 0 && credited(full_for, 1.0 / rate)) stamp -= full_for;
  }
  decision d;
  d.limit = c.burst;
  const double need = static_cast<double>(cost);
  if (tokens + 1e-9 < need && delayable(c, (need - tokens) / rate)) {
    // on_exceed: delay: the tokens taken ahead, the request to go once they have come.
    d.remaining = 0;
    d.retry_ms = ceil_ms((need - tokens) / rate);
    d.reset_ms = ceil_ms((burst - tokens + need) / rate);
    if (commit) {
      s.tokens = tokens - need;
      s.stamp = stamp;
      s.expires_at = now + d.reset_ms + 3;
    }
    return d;
  }
  if (tokens + 1e-9 < need) {
    d.allowed = false;
    d.remaining = static_cast<std::uint64_t>(std::max(0.0, std::floor(tokens + 1e-9)));  // (below 0: in debt)
    d.retry_ms = std::max<std::int64_t>(1, ceil_ms((need - tokens) / rate));
    d.reset_ms = ceil_ms((burst - tokens) / rate);
    return d;
  }
  tokens -= need;
  d.remaining = static_cast<std::uint64_t>(std::floor(tokens + 1e-9));
  d.reset_ms = ceil_ms((burst - tokens) / rate);
  if (commit) {
    s.tokens = tokens;
    s.stamp = stamp;
    // Kept past full by the credit, so a late turn finds it.
    s.expires_at = now + d.reset_ms + 3;
  }
  return d;
}

decision gcra(const config::limit_config& c, key_state& s, std::int64_t now, std::uint64_t cost, bool commit) {
  const double t = static_cast<double>(c.rate_.per.count()) / static_cast<double>(c.rate_.count);  // ms per unit
  const double tolerance = t * static_cast<double>(c.burst);
  // Times relative to now. Absolute ones are near 1.7e12 ms, where doubles are 0.25 us
  // apart, and TAT + T + T ... would drift enough to refuse a request that fits.
  double tat = s.expires_at > now ? static_cast<double>(s.count - now) + s.stamp : 0.0;
  // Late for its turn by less than the credit: the turn keeps its time (see above).
  if (tat < 0 && !credited(-tat, t)) tat = 0;
  double new_tat = tat + t * static_cast<double>(cost);
  double allow_at = new_tat - tolerance;
  decision d;
  d.limit = c.burst;
  // An admission's new TAT, kept past it by the credit, so that a late turn finds it.
  auto record = [&] {
    d.reset_ms = ceil_ms(new_tat);
    if (!commit) return;
    s.count = now;
    s.stamp = new_tat;
    s.expires_at = now + d.reset_ms + 3;
  };
  if (allow_at > 1e-9 && delayable(c, allow_at)) {
    // on_exceed: delay: admitted now, to go at its turn.
    d.remaining = 0;
    d.retry_ms = ceil_ms(allow_at);
    record();
    return d;
  }
  if (allow_at > 1e-9) {
    d.allowed = false;
    d.retry_ms = std::max<std::int64_t>(1, ceil_ms(allow_at));
    d.remaining = static_cast<std::uint64_t>(std::max(0.0, std::floor((tolerance - tat) / t + 1e-9)));
    d.reset_ms = ceil_ms(std::max(tat, 0.0));
    return d;
  }
  d.remaining = static_cast<std::uint64_t>(std::max(0.0, std::floor((tolerance - new_tat) / t + 1e-9)));
  record();
  return d;
}

decision concurrency(const config::limit_config& c, key_state& s, std::int64_t now, bool commit, std::uint64_t lease) {
  auto& l = s.leases;
  l.erase(std::remove_if(l.begin(), l.end(), [&](const auto& e) { return e.second <= now; }), l.end());
  decision d;
  d.limit = c.limit;
  d.reset_ms = 0;
  if (l.size() + 1 > c.limit) {
    d.allowed = false;
    d.remaining = 0;
    // Leases end when responses do; nothing tells when. A second is a fair retry hint.
    d.retry_ms = 1000;
    return d;
  }
  d.remaining = c.limit - l.size() - 1;
  if (commit) {
    l.emplace_back(lease, now + c.window.count());
    s.expires_at = std::max(s.expires_at, now + c.window.count());
  }
  return d;
}

// gcra: a live key's TAT moved by `units` of cost (forward: a charge; back: a give),
// kept relative to now. A TAT back at or before now is as if never used: the key expires.
void move_tat(const config::limit_config& c, key_state& s, std::int64_t now, double units) {
  const double t = static_cast<double>(c.rate_.per.count()) / static_cast<double>(c.rate_.count);
  const double tat = std::max(0.0, static_cast<double>(s.count - now) + s.stamp) + t * units;
  if (tat <= 0) {
    s.expires_at = 0;
    return;
  }
  s.count = now;
  s.stamp = tat;
  s.expires_at = now + ceil_ms(tat) + 3;
}

}  // namespace

decision evaluate(const config::limit_config& cfg, key_state& s, std::int64_t now, std::uint64_t cost, bool commit,
                  std::uint64_t lease) {
  switch (cfg.algo) {
    case algorithm::fixed_window: return fixed_window(cfg, s, now, cost, commit);
    case algorithm::sliding_log: return sliding_log(cfg, s, now, cost, commit);
    case algorithm::sliding_window: return sliding_window(cfg, s, now, cost, commit);
    case algorithm::token_bucket: return token_bucket(cfg, s, now, cost, commit);
    case algorithm::gcra: return gcra(cfg, s, now, cost, commit);
    case algorithm::concurrency: return concurrency(cfg, s, now, commit, lease);
  }
  return {};
}

void charge(const config::limit_config& c, key_state& s, std::int64_t now, std::uint64_t amount) {
  // A key gone since the request (a bucket refilled, a window ended) is begun afresh,
  // as the request's own admission would begin it, and the charge taken from that.
  if (s.expires_at <= now) {
    s = key_state{};
    (void)evaluate(c, s, now, 0, true);
  }
  // At most the whole quota at once: one answer cannot sink its client for ages.
  const auto a = static_cast<std::int64_t>(std::min(amount, config::quota(c)));
  switch (c.algo) {
    case algorithm::fixed_window:
      s.count += a;
      break;
    case algorithm::sliding_window: {
      const auto w = c.window.count();
      const auto idx = (std::max(now, s.origin + s.bucket * w) - s.origin) / w;
      if (idx == s.bucket + 1) s.previous = s.count, s.count = 0;
      else if (idx > s.bucket + 1) s.previous = 0, s.count = 0;
      s.bucket = idx;
      s.count += a;
      s.expires_at = s.origin + (idx + 2) * w;
      break;
    }
    case algorithm::token_bucket: {
      const double rate = static_cast<double>(c.rate_.count) / static_cast<double>(c.rate_.per.count());
      const double burst = static_cast<double>(c.burst);
      s.tokens = std::min(burst, s.tokens + (static_cast<double>(now) - s.stamp) * rate) - static_cast<double>(a);
      s.stamp = static_cast<double>(now);
      s.expires_at = now + ceil_ms((burst - s.tokens) / rate) + 3;
      break;
    }
    case algorithm::gcra:
      move_tat(c, s, now, static_cast<double>(a));
      break;
    case algorithm::sliding_log:
    case algorithm::concurrency:
      break;  // (their costs are known up front: config::takes_any_cost)
  }
}

void give(const config::limit_config& c, key_state& s, std::int64_t now, std::uint64_t amount) {
  if (s.expires_at <= now) return;
  const auto a = static_cast<std::int64_t>(amount);  // (at most 2^53: admin::max_grant)
  switch (c.algo) {
    case algorithm::fixed_window:
    case algorithm::sliding_window:
      s.count = std::max<std::int64_t>(0, s.count - a);
      break;
    case algorithm::token_bucket:
      s.tokens = std::min(static_cast<double>(c.burst), s.tokens + static_cast<double>(a));
      break;
    case algorithm::gcra:
      move_tat(c, s, now, -static_cast<double>(a));
      break;
    case algorithm::sliding_log:
    case algorithm::concurrency:
      break;
  }
}

void release_lease(key_state& s, std::uint64_t lease) {
  auto& l = s.leases;
  l.erase(std::remove_if(l.begin(), l.end(), [&](const auto& e) { return e.first == lease; }), l.end());
}

}  // namespace fg::limit
