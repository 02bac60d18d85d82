#include "store/redis_source.hpp"

#include <algorithm>
#include <charconv>

#include "config/config.hpp"
#include "store/limiter_script.hpp"
#include "store/redis_batcher.hpp"
#include "store/script_call.hpp"

namespace fg::store {

using limit::holds_lease;
using limit::judged;

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
      batcher_->send_idempotent(c.checks[i].key,
                                {"ZREM", c.checks[i].key, lease_member(c.nonce, batcher_->member_index(c.checks, i))});
}

void redis_source::release_unanswered(limit_call& c) {
  // (a lease is the request's nonce; ZREM of one never taken changes nothing)
  if (!batcher_ || c.nonce.empty()) return;
  for (std::size_t i = 0; i < c.checks.size(); ++i)
    if (c.checks[i].cfg->algo == config::algorithm::concurrency)
      batcher_->send_idempotent(c.checks[i].key,
                                {"ZREM", c.checks[i].key, lease_member(c.nonce, batcher_->member_index(c.checks, i))});
}

void redis_source::renew(limit_call& c) {
  // lua/renew_lease.lua: a lease already gone is not taken again.
  if (!batcher_) return;
  for (std::size_t i = 0; i < c.checks.size(); ++i)
    if (holds_lease(c, i))
      batcher_->send(c.checks[i].key, {"EVAL", renew_lease_script, "1", c.checks[i].key,
                                       lease_member(c.nonce, batcher_->member_index(c.checks, i)),
                                       std::to_string(c.checks[i].cfg->window.count())});
}

void redis_source::charge(const limit_call& c, std::size_t i, std::uint64_t amount) {
  if (!batcher_ || amount == 0) return;
  check one = c.checks[i];
  one.cost = amount;
  batcher_->charge(one);
}

std::int64_t redis_source::round_trip_ms() const { return batcher_ ? batcher_->round_trip_ms() : 0; }

}  // namespace fg::store
