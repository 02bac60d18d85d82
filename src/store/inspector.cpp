#include "store/inspector.hpp"

#include <charconv>

#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <functional>

#include "store/memory_store.hpp"
#include "store/redis_batcher.hpp"
#include "store/script_call.hpp"
#include "limit/deny_cache.hpp"
#include "store/limiter_script.hpp"
#include "redis/cluster.hpp"
#include "redis/connection.hpp"
#include "redis/slots.hpp"
#include "util/asio.hpp"

namespace fg::store {

using boost::system::error_code;

namespace {

// A connection just made (at start, or for a changed redis section) has this long to
// connect before a peek is answered "not connected"; an older one answers at once.
constexpr std::chrono::milliseconds connect_grace{1000};

bool same_endpoints(const std::vector<config::endpoint>& a, const std::vector<config::endpoint>& b) {
  return std::ranges::equal(a, b, [](const auto& x, const auto& y) { return x.host == y.host && x.port == y.port; });
}

// Whether a connection made for `a` serves `b` (the key prefix is not the connection's).
bool same_server(const config::redis_config& a, const config::redis_config& b) {
  return a.mode == b.mode && same_endpoints(a.addresses, b.addresses) && a.master_name == b.master_name &&
         a.username == b.username && a.password == b.password && a.database == b.database && a.timeout == b.timeout;
}

}  // namespace

store_inspector::store_inspector(asio::any_io_executor ex, memory_store& memory, const config::config& initial)
    : ex_(std::move(ex)), memory_(memory) {
  // Started with the admin listener, so that the first /limits finds it connected.
  if (initial.store == config::store_kind::redis) connect_for(initial.redis);
}

store_inspector::~store_inspector() {
  if (conn_) conn_->stop();
  if (cluster_) cluster_->stop();
}

void store_inspector::connect_for(const config::redis_config& rc) {
  if ((conn_ || cluster_) && same_server(redis_cfg_, rc)) return;
  if (conn_) conn_->stop();
  if (cluster_) cluster_->stop();
  conn_.reset();
  cluster_.reset();
  redis_cfg_ = rc;
  conn_made_ = std::chrono::steady_clock::now();
  // Started on the executor's thread, as everything the connection does.
  if (rc.mode == config::redis_mode::cluster) {
    cluster_ = std::make_shared<redis::cluster_client>(ex_, rc, limiter_script);
    asio::post(ex_, [c = cluster_] { c->start(); });
  } else {
    conn_ = std::make_shared<redis::connection>(ex_, rc, limiter_script);
    asio::post(ex_, [c = conn_] { c->start(); });
  }
}

bool store_inspector::connected() const { return conn_ ? conn_->connected() : cluster_ && cluster_->connected(); }

asio::awaitable<error_code> store_inspector::peek(const config::config& cfg, std::span<const check> checks,
                                                  std::span<decision> out) {
  if (checks.empty()) co_return error_code{};
  if (cfg.store == config::store_kind::redis) co_return co_await peek_redis(cfg, checks, out);
  memory_.peek(checks, out, limit::now_ms());
  co_return error_code{};
}

asio::awaitable<void> store_inspector::connected_for(const config::redis_config& rc) {
  connect_for(rc);
  const auto grace_end = conn_made_ + connect_grace;
  while (!connected() && std::chrono::steady_clock::now() < grace_end) {
    asio::steady_timer t(ex_, std::chrono::milliseconds(10));
    co_await t.async_wait(asio::use_awaitable);
  }
}

asio::awaitable<error_code> store_inspector::peek_redis(const config::config& cfg, std::span<const check> checks,
                                                        std::span<decision> out) {
  co_await connected_for(cfg.redis);
  if (!cluster_) co_return co_await dry_run(checks, out);
  // A dry run records nothing, so each check alone answers as it would with the others.
  for (std::size_t i = 0; i < checks.size(); ++i)
    if (auto ec = co_await dry_run(checks.subspan(i, 1), out.subspan(i, 1))) co_return ec;
  co_return error_code{};
}

asio::awaitable<error_code> store_inspector::dry_run(std::span<const check> checks, std::span<decision> out) {
  script_call call;
  // The nonce names no entry in a dry run; the script only wants one where it would.
  const auto slot = call.add(checks, "inspect");
  auto [argc, args] = call.finish(true);
  // The decisions are read in the reply's callback: the reply lives only then.
  co_return co_await eval(checks.front().key, argc, std::move(args), [&](const redisReply* r) {
    if (!call.read(r)) return false;
    call.decisions(slot, checks, out);
    return true;
  });
}

asio::awaitable<error_code> store_inspector::eval(std::string_view key, std::size_t argc, std::string args,
                                                  std::function<bool(const redisReply*)> read) {
  error_code ec;
  // The completion runs in hiredis' callback; the coroutine resumes from a post.
  auto init = [&](auto handler) {
    auto h = std::make_shared<decltype(handler)>(std::move(handler));
    auto done = [&, h, ex = ex_](error_code e, const redisReply* r) {
      if (!e && !read(r)) e = redis::make_error_code(redis::errc::protocol);
      ec = e;
      asio::post(ex, [h]() mutable { std::move (*h)(); });
    };
    if (cluster_) cluster_->eval(redis::key_slot(key), argc, std::move(args), std::move(done));
    else conn_->eval(argc, std::move(args), std::move(done));
  };
  co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(init, asio::use_awaitable);
  co_return ec;
}

std::string resets_key(const config::config& cfg) { return cfg.redis.key_prefix + "{resets}"; }

asio::awaitable<error_code> store_inspector::reset(const config::config& cfg, std::span<const check> checks) {
  if (cfg.store != config::store_kind::redis) {
    for (const auto& c : checks) memory_.erase(c.key);
    co_return error_code{};
  }
  co_await connected_for(cfg.redis);
  if (!connected()) co_return redis::make_error_code(redis::errc::not_connected);
  // (GCC 12: no braced temporary inside a co_await expression)
  for (const auto& c : checks) {
    std::vector<std::string> del{"DEL", c.key};
    auto ec = co_await command(c.key, std::move(del));
    if (ec) co_return ec;
  }
  co_return co_await record_resets(cfg, checks);
}

asio::awaitable<error_code> store_inspector::record_resets(const config::config& cfg,
                                                           std::span<const check> checks) {
  // Recorded by the Redis time of the set's own node: the gateways read it by that time.
  const auto set = resets_key(cfg);
  redis::reply time;
  std::vector<std::string> ask{"TIME"};
  if (auto ec = co_await command(set, std::move(ask), &time)) co_return ec;
  std::int64_t secs = 0, micros = 0;
  if (time.type != redis::reply::kind::array || time.elements.size() != 2 ||
      std::from_chars(time.elements[0].str.data(), time.elements[0].str.data() + time.elements[0].str.size(), secs).ec !=
          std::errc{} ||
      std::from_chars(time.elements[1].str.data(), time.elements[1].str.data() + time.elements[1].str.size(), micros)
              .ec != std::errc{})
    co_return redis::make_error_code(redis::errc::protocol);
  const auto now_ms = std::to_string(secs * 1000 + micros / 1000);
  std::vector<std::vector<std::string>> writes;
  for (const auto& c : checks) writes.push_back({"ZADD", set, now_ms, c.key});
  writes.push_back({"ZREMRANGEBYRANK", set, "0", "-1001"});  // the last 1,000 resets
  writes.push_back({"PEXPIRE", set, "3600000"});              // an hour after the last one
  for (auto& w : writes) {
    auto ec = co_await command(set, std::move(w));
    if (ec) co_return ec;
  }
  co_return error_code{};
}

asio::awaitable<error_code> store_inspector::grant(const config::config& cfg, std::span<const check> checks) {
  if (cfg.store != config::store_kind::redis) {
    const auto now = limit::now_ms();
    for (const auto& c : checks) memory_.give(c, c.cost, now);
    co_return error_code{};
  }
  co_await connected_for(cfg.redis);
  if (!connected()) co_return redis::make_error_code(redis::errc::not_connected);
  // On a cluster one call per check (they may span slots); else one for all.
  if (cluster_) {
    for (std::size_t i = 0; i < checks.size(); ++i)
      if (auto ec = co_await refund(checks.subspan(i, 1))) co_return ec;
  } else if (auto ec = co_await refund(checks)) {
    co_return ec;
  }
  co_return co_await record_resets(cfg, checks);
}

asio::awaitable<error_code> store_inspector::refund(std::span<const check> checks) {
  script_call call;
  call.add(checks, "grant");  // (no nonce is read: no sliding_log or concurrency limit)
  auto [argc, args] = call.finish(script_call::mode::refund);
  // A refund answers an empty string.
  co_return co_await eval(checks.front().key, argc, std::move(args),
                          [](const redisReply* r) { return r && r->type == REDIS_REPLY_STRING && r->len == 0; });
}

asio::awaitable<error_code> store_inspector::command(std::string_view key, std::vector<std::string> args,
                                                     redis::reply* out) {
  error_code ec;
  auto init = [&](auto handler) {
    auto h = std::make_shared<decltype(handler)>(std::move(handler));
    auto done = [&, h, ex = ex_](error_code e, const redis::reply& r) {
      ec = e ? e : r.is_error() ? redis::make_error_code(redis::errc::protocol) : error_code{};
      if (out && !ec) *out = r;
      asio::post(ex, [h]() mutable { std::move (*h)(); });
    };
    if (cluster_) cluster_->send(redis::key_slot(key), args, std::move(done));
    else conn_->send(args, std::move(done));
  };
  co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(init, asio::use_awaitable);
  co_return ec;
}

}  // namespace fg::store
