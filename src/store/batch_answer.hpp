#pragma once
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <memory>

#include "store/redis_batcher.hpp"
#include "store/script_call.hpp"
#include "limit/deny_cache.hpp"
#include "obs/metrics.hpp"
#include "redis/error.hpp"

struct redisReply;

// What the batchers (redis_batcher, cluster_batcher) do with a script call's answer:
// one piece of code for both. A Batch has `call` (a script_call) and `waiters`, each
// with checks, out, slot, resume and ec. Internal to store/.
namespace fg::store::detail {

// Reads the answer `r` (or the error `ec`) of `b`'s call into its waiters, and counts it:
// the round trip since `sent` (into `rtt_us`, a moving average) and the failures.
template <class Batch>
void read_answer(Batch& b, boost::system::error_code ec, const redisReply* r,
                 std::chrono::steady_clock::time_point sent, std::int64_t& rtt_us, obs::worker_metrics* metrics) {
  if (!ec) {
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - sent).count();
    rtt_us += (us - rtt_us) / 8;
    if (metrics) metrics->store_time(static_cast<std::uint64_t>(us));
  }
  if (!ec && !b.call.read(r)) ec = redis::make_error_code(redis::errc::protocol);
  if (ec && metrics) metrics->store_error(cause_of(ec));
  for (auto& w : b.waiters) {
    w.ec = ec;
    if (!ec) b.call.decisions(w.slot, w.checks, w.out);
  }
}

// Resumes `b`'s waiters from the event loop (not from inside hiredis' callback), inside
// the owner's resume scope if it has one.
template <class Batch, class Executor>
void resume_later(const Executor& ex, std::shared_ptr<Batch> b, redis_batcher::resume_scope scope) {
  boost::asio::post(ex, [b = std::move(b), scope] {
    auto resume = [](void* p) {
      for (auto& w : static_cast<Batch*>(p)->waiters) std::move(w.resume)(w.ec);
    };
    if (scope) scope(b->waiters.size(), resume, b.get());
    else resume(b.get());
  });
}

}  // namespace fg::store::detail
