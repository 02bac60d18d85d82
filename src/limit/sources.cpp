#include "limit/sources.hpp"

#include <algorithm>
#include <charconv>

#include "config/config.hpp"
#include "limit/memory_store.hpp"
#include "limit/redis_store.hpp"

namespace fg::limit {

boost::asio::awaitable<std::tuple<boost::system::error_code>> decision_source::wait(limit_call&) {
  co_return std::tuple{boost::system::error_code{}};
}

status decision_source::finish(limit_call& c, boost::system::error_code) { return status::ok; }

bool holds_lease(const limit_call& c, std::size_t i) {
  return c.checks[i].cfg->algo == config::algorithm::concurrency && c.decisions[i].allowed;
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

status memory_source::start(limit_call& c) {
  store_.evaluate(c.checks, c.decisions, c.now, c.lease);
  return judged(c, this);
}

void memory_source::release(limit_call& c) {
  for (std::size_t i = 0; i < c.checks.size(); ++i)
    if (holds_lease(c, i)) store_.release(c.checks[i].key, c.lease);
}

void memory_source::renew(limit_call& c) {
  const auto now = memory_store::now_ms();
  for (std::size_t i = 0; i < c.checks.size(); ++i)
    if (holds_lease(c, i)) store_.renew(c.checks[i].key, c.lease, now, c.checks[i].cfg->window.count());
}

redis_source::redis_source(redis_evaluator& batcher, std::string nonce_prefix)
    : batcher_(&batcher), nonce_prefix_(std::move(nonce_prefix)) {}

status redis_source::start(limit_call& c) {
  if (!batcher_) return status::error;
  // A nonce only if a limit names Redis entries after the request.
  c.nonce.clear();
  if (std::any_of(c.checks.begin(), c.checks.end(), [](const auto& k) { return config::names_entries(*k.cfg); })) {
    char buf[24];
    auto end = std::to_chars(buf, buf + sizeof buf, c.lease).ptr;
    c.nonce.assign(nonce_prefix_).append(buf, end);
  }
  return status::pending;
}

boost::asio::awaitable<std::tuple<boost::system::error_code>> redis_source::wait(limit_call& c) {
  return batcher_->evaluate(c.checks, c.nonce, c.decisions);
}

status redis_source::finish(limit_call& c, boost::system::error_code ec) {
  if (ec) return status::error;
  return judged(c, this);
}

void redis_source::release(limit_call& c) {
  if (!batcher_) return;
  for (std::size_t i = 0; i < c.checks.size(); ++i)
    if (holds_lease(c, i))
      batcher_->send(c.checks[i].key, {"ZREM", c.checks[i].key, lease_member(c.nonce, batcher_->member_index(c.checks, i))});
}

void redis_source::renew(limit_call& c) {
  // A lease that is already gone (the store lost it) is not taken again: that could
  // go past the limit.
  static const std::string renew_script =
      "local t = redis.call('TIME') local now = t[1] * 1000 + t[2] / 1000 "
      "if redis.call('ZADD', KEYS[1], 'XX', 'CH', now + ARGV[2], ARGV[1]) == 1 then "
      "redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";
  if (!batcher_) return;
  for (std::size_t i = 0; i < c.checks.size(); ++i)
    if (holds_lease(c, i))
      batcher_->send(c.checks[i].key, {"EVAL", renew_script, "1", c.checks[i].key,
                                       lease_member(c.nonce, batcher_->member_index(c.checks, i)),
                                       std::to_string(c.checks[i].cfg->window.count())});
}

std::int64_t redis_source::round_trip_ms() const { return batcher_ ? batcher_->round_trip_ms() : 0; }

}  // namespace fg::limit
