#include <boost/asio/as_tuple.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>

#include "http/session_impl.hpp"
#include "limit/headers.hpp"
#include "limit/keys.hpp"
#include "limit/memory_store.hpp"
#include "limit/redis_store.hpp"
#include "obs/logging.hpp"
#include "redis/connection.hpp"

// Rate limiting for a session: keys, the store (Redis batch or memory), the failure
// policy, 429 answers and the headers of allowed responses, concurrency leases.
namespace fg::http::detail {

namespace {
std::optional<std::string_view> lookup_header(const void* ctx, std::string_view name) {
  const auto& h = *static_cast<const bhttp::fields*>(ctx);
  auto it = h.find(name);
  if (it == h.end()) return std::nullopt;
  return std::string_view(it->value());
}
}  // namespace

session::limits_step session::begin_limits(const config::route_config& route) {
  const auto& req = parser_->get();
  const auto& cfg = *rt_->cfg;
  limit::request_parts parts;
  parts.client = client_key_;
  std::string_view target = req.target();
  if (auto q = target.find('?'); q != std::string_view::npos) parts.query = target.substr(q + 1);
  parts.header = &lookup_header;
  parts.header_ctx = static_cast<const bhttp::fields*>(&req.base());
  // The checks' key strings are kept from request to request, their capacity reused.
  std::size_t n = 0;
  for (const auto& l : route.limits) {
    if (n == checks_.size()) checks_.emplace_back();
    auto& c = checks_[n];
    if (!limit::build_key(c.key, cfg.redis.key_prefix, route.name, l, parts)) continue;  // on_missing_key: skip
    c.cfg = &l;
    c.cost = l.cost;
    ++n;
  }
  checks_.resize(n);
  decisions_.assign(checks_.size(), limit::decision{});
  if (checks_.empty()) return limits_step::go_on;
  lease_ = ++ctx_.next_lease;
  limits_now_ = limit::memory_store::now_ms();
  leases_in_redis_ = false;
  if (ctx_.redis == nullptr) return decide_in_memory(route);
  // Known denials are answered here: a flood from one client costs Redis nothing.
  bool cached = false;
  for (std::size_t i = 0; i < checks_.size(); ++i) {
    const auto& l = *checks_[i].cfg;
    if (!config::denials_hold(l)) continue;
    if (auto until = ctx_.denies->denied_until(checks_[i].key, limits_now_)) {
      decisions_[i] = {false, config::quota(l), 0, until - limits_now_, until - limits_now_};
      cached = true;
    }
  }
  if (cached) {
    limit::append_rate_headers(rate_headers_, route.response.headers, checks_, decisions_, true,
                               limit::reported::denying_limits);
    return limits_step::limited;
  }
  // A nonce only if a limit names Redis entries after the request.
  nonce_.clear();
  if (std::any_of(checks_.begin(), checks_.end(), [](const auto& c) { return config::names_entries(*c.cfg); })) {
    char buf[24];
    auto end = std::to_chars(buf, buf + sizeof buf, lease_).ptr;
    nonce_.assign(ctx_.nonce_prefix).append(buf, end);
  }
  return limits_step::ask_redis;
}

session::limits_step session::end_limits(const config::route_config& route, error_code ec) {
  if (ec) {
    // The store could not answer: the route's failure policy decides.
    log_store_error(route, ec.message());
    if (route.store_error == config::on_store_error::deny) return limits_step::unavailable;
    if (route.store_error == config::on_store_error::allow) return limits_step::go_on;
    return decide_in_memory(route);  // local: this instance enforces the same limits alone
  }
  leases_in_redis_ = true;
  // A denial is repeated locally until shortly before it ends: early by the store's
  // round trip (and 1 ms of rounding), so that the next request reaches the store as
  // the limit admits again, not a round trip late; a denial shorter than that is not
  // cached at all. Otherwise every emission interval of a fast limit would lose a round
  // trip, and a 1000/s limit would admit far less than it promises.
  const std::int64_t early = ctx_.batcher->round_trip_ms() + 1;
  for (std::size_t i = 0; i < checks_.size(); ++i)
    if (!decisions_[i].allowed && config::denials_hold(*checks_[i].cfg) && decisions_[i].retry_ms > early + 1)
      ctx_.denies->remember(checks_[i].key, limits_now_ + decisions_[i].retry_ms - early);
  return decide(route);
}

session::limits_step session::decide_in_memory(const config::route_config& route) {
  auto r = ctx_.memory->evaluate(checks_, decisions_, limits_now_, lease_);
  if (r != limit::memory_store::result::ok) {
    if (route.store_error == config::on_store_error::deny) return limits_step::unavailable;
    return limits_step::go_on;
  }
  return decide(route);
}

session::limits_step session::decide(const config::route_config& route) {
  bool denied = false;
  for (std::size_t i = 0; i < checks_.size(); ++i) {
    if (decisions_[i].allowed) continue;
    if (checks_[i].cfg->shadow) {
      spdlog::info("shadow limit {}/{} would deny {} (retry in {}ms)", route.name, checks_[i].cfg->name, client_key_,
                   decisions_[i].retry_ms);
      continue;
    }
    denied = true;
  }
  // Into the session's buffer: its capacity is reused request after request.
  limit::append_rate_headers(rate_headers_, route.response.headers, checks_, decisions_, denied);
  if (denied) return limits_step::limited;
  leases_held_ = std::any_of(checks_.begin(), checks_.end(),
                             [](const auto& c) { return c.cfg->algo == config::algorithm::concurrency; });
  return limits_step::go_on;
}

// The connection stays open only if the unread body cannot be mistaken for a request.
asio::awaitable<session::outcome> session::send_limited(const config::route_config& route, std::string_view headers) {
  bool has_body = framing_.type != body_framing::kind::none;
  co_return co_await send_local(route.response.status, parser_->keep_alive() && !has_body, route.response.body,
                                headers, route.response.content_type);
}

asio::awaitable<session::outcome> session::send_store_unavailable() {
  bool has_body = framing_.type != body_framing::kind::none;
  co_return co_await send_local(503, parser_->keep_alive() && !has_body, {}, "Retry-After: 1\r\n");
}

void session::release_leases() {
  if (!leases_held_) return;
  leases_held_ = false;
  for (std::size_t i = 0; i < checks_.size(); ++i) {
    if (checks_[i].cfg->algo != config::algorithm::concurrency || !decisions_[i].allowed) continue;
    if (leases_in_redis_ && ctx_.redis) ctx_.redis->send({"ZREM", checks_[i].key, limit::lease_member(nonce_, i)}, {});
    else ctx_.memory->release(checks_[i].key, lease_);
  }
}

std::chrono::milliseconds session::lease_renewal_interval() const {
  std::chrono::milliseconds every{0};
  if (!leases_held_) return every;
  for (std::size_t i = 0; i < checks_.size(); ++i) {
    if (checks_[i].cfg->algo != config::algorithm::concurrency || !decisions_[i].allowed) continue;
    auto third = std::max<std::chrono::milliseconds>(checks_[i].cfg->window / 3, std::chrono::milliseconds(10));
    if (every.count() == 0 || third < every) every = third;
  }
  return every;
}

void session::renew_leases() {
  // A lease that is already gone (the store lost it) is not taken again: that could
  // go past the limit.
  static const std::string renew_script =
      "local t = redis.call('TIME') local now = t[1] * 1000 + t[2] / 1000 "
      "if redis.call('ZADD', KEYS[1], 'XX', 'CH', now + ARGV[2], ARGV[1]) == 1 then "
      "redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";
  const auto now = limit::memory_store::now_ms();
  for (std::size_t i = 0; i < checks_.size(); ++i) {
    const auto& l = *checks_[i].cfg;
    if (l.algo != config::algorithm::concurrency || !decisions_[i].allowed) continue;
    if (leases_in_redis_ && ctx_.redis)
      ctx_.redis->send({"EVAL", renew_script, "1", checks_[i].key, limit::lease_member(nonce_, i),
                        std::to_string(l.window.count())},
                       {});
    else
      ctx_.memory->renew(checks_[i].key, lease_, now, l.window.count());
  }
}

void session::log_store_error(const config::route_config& route, const std::string& why) {
  // One line per cause per few seconds per worker, with a count, never one per request.
  thread_local obs::error_log_limiter limiter;
  std::uint64_t suppressed = 0;
  if (!limiter.due(why, clock::now(), suppressed)) return;
  const char* policy = route.store_error == config::on_store_error::deny    ? "deny"
                       : route.store_error == config::on_store_error::local ? "local"
                                                                            : "allow";
  spdlog::warn("rate-limit store error on route {}: {} (on_store_error: {}; {} more since the last report)",
               route.name, why, policy, suppressed);
}

}  // namespace fg::http::detail
