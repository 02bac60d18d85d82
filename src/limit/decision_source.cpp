#include "limit/decision_source.hpp"

#include <algorithm>
#include <limits>

#include "config/config.hpp"

namespace fg::limit {

boost::asio::awaitable<std::tuple<boost::system::error_code>> decision_source::wait(limit_call&) {
  co_return std::tuple{boost::system::error_code{}};
}

status decision_source::finish(limit_call& c, boost::system::error_code) { return status::ok; }

bool holds_lease(const limit_call& c, std::size_t i) {
  return c.checks[i].cfg->algo == config::algorithm::concurrency && c.decisions[i].allowed;
}

namespace {

// A byte quota a chunked body is held to: cost: body_bytes, enforced, and decided by a
// store (limit 0: a decision no store made, on_store_error: allow).
bool bounds_body(const config::limit_config& l, const decision& d) {
  return l.cost_from == config::limit_config::cost_kind::body_bytes && !l.shadow && d.allowed && d.limit > 0;
}

}  // namespace

std::uint64_t body_bytes_left(const limit_call& c) {
  std::uint64_t most = std::numeric_limits<std::uint64_t>::max();
  if (!c.asked) return most;
  for (std::size_t i = 0; i < c.checks.size() && i < c.decisions.size(); ++i)
    if (bounds_body(*c.checks[i].cfg, c.decisions[i])) most = std::min(most, c.decisions[i].remaining + 1);
  return most;
}

void deny_over_body_quota(limit_call& c, std::uint64_t bytes) {
  for (std::size_t i = 0; i < c.checks.size() && i < c.decisions.size(); ++i) {
    auto& d = c.decisions[i];
    if (!bounds_body(*c.checks[i].cfg, d) || bytes <= d.remaining + 1) continue;
    d.allowed = false;
    d.remaining = 0;
    d.retry_ms = std::max<std::int64_t>(d.reset_ms, 1);
  }
}

std::int64_t renewal_interval_ms(const limit_call& c) {
  std::int64_t every = 0;
  if (!c.holder) return every;
  for (std::size_t i = 0; i < c.checks.size(); ++i) {
    if (!holds_lease(c, i)) continue;
    auto third = std::max<std::int64_t>(c.checks[i].cfg->window.count() / 3, 10);
    if (every == 0 || third < every) every = third;
  }
  return every;
}

status judged(limit_call& c, decision_source* source) {
  // A shadow limit's denial is reported, never enforced (the stores took that into account).
  bool denied = false;
  for (std::size_t i = 0; i < c.checks.size(); ++i) denied = denied || (!c.decisions[i].allowed && !c.checks[i].cfg->shadow);
  if (!denied && std::any_of(c.checks.begin(), c.checks.end(), [](const auto& k) {
        return k.cfg->algo == config::algorithm::concurrency;
      }))
    c.holder = source;
  return denied ? status::over_limit : status::ok;
}

}  // namespace fg::limit
