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

std::uint64_t body_bytes_left(const limit_call& c) {
  std::uint64_t most = std::numeric_limits<std::uint64_t>::max();
  if (!c.asked) return most;
  for (std::size_t i = 0; i < c.checks.size() && i < c.decisions.size(); ++i) {
    const auto& l = *c.checks[i].cfg;
    const auto& d = c.decisions[i];
    // (limit 0: a decision no store made, on_store_error: allow)
    if (l.cost_from == config::limit_config::cost_kind::body_bytes && !l.shadow && d.allowed && d.limit > 0)
      most = std::min(most, d.remaining + 1);
  }
  return most;
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
