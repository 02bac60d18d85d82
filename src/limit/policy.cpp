#include "limit/policy.hpp"

#include <spdlog/spdlog.h>

#include "config/config.hpp"
#include "limit/rate_headers.hpp"
#include "limit/deny_cache.hpp"

namespace fg::limit {

policy::policy(decision_source& inner, decision_source& local, deny_cache* denies, std::uint64_t lease_base)
    : inner_(inner), local_(local), denies_(denies), next_lease_(lease_base) {}

void policy::set_log(log_sink shadow, log_sink store_error) {
  shadow_log_ = std::move(shadow);
  error_log_sink_ = std::move(store_error);
}

status policy::start(limit_call& c) {
  c.holder = nullptr;
  c.decided_locally = false;
  c.headers.clear();
  c.decisions.assign(c.checks.size(), decision{});
  if (c.checks.empty()) return status::ok;
  c.lease = ++next_lease_;
  c.now = limit::now_ms();
  if (denies_) {
    if (auto s = from_cache(c); s != status::pending) return s;
  }
  auto s = inner_.start(c);
  if (s == status::pending) return s;
  return s == status::error ? on_error(c, "store error") : answered(c, s);
}

boost::asio::awaitable<std::tuple<boost::system::error_code>> policy::wait(limit_call& c) { return inner_.wait(c); }

status policy::finish(limit_call& c, boost::system::error_code ec) {
  auto s = inner_.finish(c, ec);
  if (s == status::error) return on_error(c, ec ? ec.message() : "store error");
  if (denies_) remember_denials(c);
  return answered(c, s);
}

// Known denials are answered here: a flood from one client costs the store nothing.
status policy::from_cache(limit_call& c) {
  bool cached = false;
  for (std::size_t i = 0; i < c.checks.size(); ++i) {
    const auto& l = *c.checks[i].cfg;
    if (!config::denials_hold(l)) continue;
    if (auto until = denies_->denied_until(c.checks[i].key, c.checks[i].cfg, c.checks[i].cost, c.now)) {
      c.decisions[i] = {false, config::quota(l), 0, until - c.now, until - c.now};
      cached = true;
    }
  }
  if (!cached) return status::pending;
  if (metrics_) {
    metrics_->deny_cache_hit();
    for (std::size_t i = 0; i < c.checks.size(); ++i)
      if (!c.decisions[i].allowed) metrics_->decision(c.checks[i].cfg->index, obs::outcome::denied);
  }
  append_rate_headers(c.headers, c.route->response.headers, c.checks, c.decisions, true, reported::denying_limits);
  return status::over_limit;
}

// A denial is repeated locally until shortly before it ends: early by the store's round
// trip (and 1 ms of rounding), so that the next request reaches the store as the limit
// admits again, not a round trip late; a denial shorter than that is not cached at all.
// Otherwise every emission interval of a fast limit would lose a round trip, and a
// 1000/s limit would admit far less than it promises. A limit that delays (on_exceed:
// delay) admits again max_delay before that: the denial is held that much less.
void policy::remember_denials(const limit_call& c) {
  const std::int64_t early = inner_.round_trip_ms() + 1;
  for (std::size_t i = 0; i < c.checks.size(); ++i) {
    const auto& l = *c.checks[i].cfg;
    const std::int64_t hold = c.decisions[i].retry_ms - l.max_delay.count();
    if (!c.decisions[i].allowed && config::denials_hold(l) && hold > early + 1)
      denies_->remember(c.checks[i].key, c.checks[i].cfg, c.checks[i].cost, c.now + hold - early);
  }
}

void policy::charge(const limit_call& c, std::size_t i, std::uint64_t amount) {
  (c.decided_locally ? local_ : inner_).charge(c, i, amount);
}

void policy::count(const limit_call& c, obs::outcome o) const {
  for (const auto& k : c.checks) metrics_->decision(k.cfg->index, o);
}

status policy::answered(limit_call& c, status s, bool local) {
  const auto& route = *c.route;
  if (metrics_ && local) count(c, obs::outcome::local_fallback);
  else if (metrics_)
    for (std::size_t i = 0; i < c.checks.size(); ++i) {
      const auto& d = c.decisions[i];
      const auto& l = *c.checks[i].cfg;
      metrics_->decision(l.index, d.allowed && d.retry_ms > 0 && l.max_delay.count() > 0 ? obs::outcome::delayed
                                  : d.allowed                                          ? obs::outcome::allowed
                                  : l.shadow                                           ? obs::outcome::shadow_denied
                                                                                       : obs::outcome::denied);
    }
  for (std::size_t i = 0; i < c.checks.size(); ++i) {
    if (c.decisions[i].allowed || !c.checks[i].cfg->shadow) continue;
    auto line = fmt::format("shadow limit {}/{} would deny {} (retry in {}ms)", route.name, c.checks[i].cfg->name,
                            c.client, c.decisions[i].retry_ms);
    if (shadow_log_) shadow_log_(line);
    else spdlog::info("{}", line);
  }
  // Into the call's buffer: its capacity is reused request after request.
  append_rate_headers(c.headers, route.response.headers, c.checks, c.decisions, s == status::over_limit);
  return s;
}

// The store could not answer: the route's failure policy decides.
status policy::on_error(limit_call& c, const std::string& why) {
  const auto& route = *c.route;
  // One line per cause per few seconds, with a count, never one per request.
  std::uint64_t suppressed = 0;
  if (error_log_.due(why, std::chrono::steady_clock::now(), suppressed)) {
    const char* name = route.store_error == config::on_store_error::deny    ? "deny"
                       : route.store_error == config::on_store_error::local ? "local"
                                                                            : "allow";
    auto line = fmt::format("rate-limit store error on route {}: {} (on_store_error: {}; {} more since the last report)",
                            route.name, why, name, suppressed);
    if (error_log_sink_) error_log_sink_(line);
    else spdlog::warn("{}", line);
  }
  c.holder = nullptr;
  // A lease the store may have granted before the answer was lost would be held until
  // its lifetime ends, starving the limit: it is given back now.
  inner_.release_unanswered(c);
  c.decisions.assign(c.checks.size(), decision{});
  if (route.store_error == config::on_store_error::deny) {
    if (metrics_) count(c, obs::outcome::store_error_denied);
    return status::error;
  }
  if (route.store_error == config::on_store_error::allow || &local_ == &inner_) {
    if (metrics_) count(c, obs::outcome::store_error_allowed);
    return status::ok;
  }
  // local: this instance enforces the same limits alone.
  c.decided_locally = true;
  auto s = local_.start(c);
  return s == status::error ? status::ok : answered(c, s, true);
}

}  // namespace fg::limit
