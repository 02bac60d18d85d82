#include "store/cluster_batcher.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "store/batch_answer.hpp"
#include "obs/metrics.hpp"
#include "redis/cluster.hpp"
#include "redis/slots.hpp"
#include "util/asio.hpp"

namespace fg::store {

using error_code = boost::system::error_code;

struct cluster_batcher::batch {
  struct waiter {
    std::span<const check> checks;
    std::span<decision> out;
    script_call::slot slot;
    handler resume;
    std::uint16_t key_slot;  // the slot of its checks
    std::string_view nonce;
    error_code ec{};
  };
  std::uint16_t slot = 0;  // the first waiter's
  bool mixed = false;      // its waiters' checks are on more than one slot
  script_call call;
  std::vector<waiter> waiters;
};

// What a call's completion needs of its batcher, which may be gone by then.
struct cluster_batcher::flow {
  cluster_batcher* owner = nullptr;
  std::vector<unsigned> in_flight;  // per lane: calls of its round not answered yet
  std::int64_t rtt_us = 0;
  resend_queue unsent;
};

// A request whose checks span slots: one part per slot, each a copy of its checks (in
// the request's order) and their decisions.
struct cluster_batcher::split {
  struct part {
    std::uint16_t slot;
    std::vector<check> checks;
    std::vector<decision> out;
    std::vector<std::size_t> index;  // the request's check each one is
    error_code ec{};
  };
  // (Constructed with its handler: Boost 1.81's any_completion_handler move assignment
  // recurses without end.)
  split(std::span<decision> o, std::string_view n, handler h) : out(o), nonce(n), resume(std::move(h)) {}
  std::span<decision> out;
  std::string_view nonce;
  std::vector<part> parts;
  std::size_t left = 0;
  handler resume;
};

cluster_batcher::cluster_batcher(asio::any_io_executor ex, std::shared_ptr<redis::cluster_client> c,
                                 std::size_t max_batch, resume_scope scope)
    : ex_(std::move(ex)), client_(std::move(c)), max_batch_(max_batch), scope_(scope),
      flow_(std::make_shared<flow>()) {
  flow_->owner = this;
}

cluster_batcher::~cluster_batcher() { flow_->owner = nullptr; }

std::int64_t cluster_batcher::round_trip_ms() const { return (flow_->rtt_us + 999) / 1000; }

void cluster_batcher::send(std::string_view key, const std::vector<std::string>& args) {
  client_->send(redis::key_slot(key), args, {});
}

void cluster_batcher::send_idempotent(std::string_view key, const std::vector<std::string>& args) {
  client_->send(redis::key_slot(key), args,
                [f = flow_, key = std::string(key), args](error_code ec, redis::reply) mutable {
                  if (ec) f->unsent.keep(key, std::move(args));
                });
}

void cluster_batcher::resend() {
  if (flow_->unsent.size() == 0) return;
  for (auto& it : flow_->unsent.due(std::chrono::steady_clock::now())) send_idempotent(it.key, it.args);
}

void cluster_batcher::charge(const check& c) {
  script_call call;
  call.add(std::span(&c, 1), {});
  auto [argc, args] = call.finish(script_call::mode::charge);
  client_->eval(redis::key_slot(c.key), argc, std::move(args), [](error_code ec, const redisReply* r) {
    if (!ec && !(r && r->type == REDIS_REPLY_ERROR)) return;
    log_charge_failure(ec ? ec.message() : std::string(r->str, r->len));
  });
}

std::size_t cluster_batcher::member_index(std::span<const check> checks, std::size_t i) const {
  // Its place among the request's checks of its own slot: the index its part's call used.
  const auto slot = redis::key_slot(checks[i].key);
  std::size_t n = 0;
  for (std::size_t j = 0; j < i; ++j) n += redis::key_slot(checks[j].key) == slot;
  return n;
}

void cluster_batcher::add(std::uint16_t slot, std::span<const check> checks, std::string_view nonce,
                          std::span<decision> out, handler resume) {
  const auto node = client_->node_of(slot);
  const std::size_t lane = node == redis::cluster_client::npos ? 0 : node + 1;
  if (lane >= lanes_.size()) {
    lanes_.resize(lane + 1);
    flow_->in_flight.resize(lane + 1, 0);
  }
  auto& b = lanes_[lane].open;
  if (!b) {
    b = std::make_unique<batch>();
    b->slot = slot;
  }
  // Requests of slots no master serves (yet) each go alone: they fail, or are redirected.
  if (b->slot != slot && lane == 0) {
    auto alone = std::make_unique<batch>();
    alone->slot = slot;
    auto at = alone->call.add(checks, nonce);
    alone->waiters.push_back({checks, out, at, std::move(resume), slot, nonce});
    send_batch(lane, std::move(alone));
    return;
  }
  b->mixed = b->mixed || b->slot != slot;
  auto at = b->call.add(checks, nonce);
  b->waiters.push_back({checks, out, at, std::move(resume), slot, nonce});
  if (b->waiters.size() >= max_batch_) {
    // Full: goes now, in flight or not.
    send_batch(lane, std::move(b));
    return;
  }
  schedule_flush(lane);
}

void cluster_batcher::schedule_flush(std::size_t lane) {
  auto& l = lanes_[lane];
  if (l.posted || flow_->in_flight[lane] > 0 || !l.open) return;
  l.posted = true;
  // At the end of this turn of the event loop: every request that becomes ready in it
  // joins its master's call.
  asio::post(ex_, [this, lane] {
    lanes_[lane].posted = false;
    if (flow_->in_flight[lane] == 0) flush(lane);
  });
}

void cluster_batcher::flush(std::size_t lane) {
  if (auto b = std::move(lanes_[lane].open)) send_batch(lane, std::move(b));
}

void cluster_batcher::send_batch(std::size_t lane, std::unique_ptr<batch> owned) {
  resend();
  auto b = std::shared_ptr<batch>(std::move(owned));
  // One slot: its keys declared, redirections followed. Several (of one master): the
  // keys in ARGV, one call to the master; if it no longer serves them all (a stale map,
  // a slot being moved), the script fails before it writes, and the call goes again
  // slot by slot (resend_by_slot).
  auto [argc, args] = b->call.finish(script_call::mode::decide, b->mixed);
  ++flow_->in_flight[lane];
  const auto sent = std::chrono::steady_clock::now();
  if (metrics_) metrics_->store_call(b->waiters.size());
  auto* metrics = metrics_;
  auto done = [b, lane, ex = ex_, flow = flow_, sent, scope = scope_, metrics](error_code ec, const redisReply* r) {
    if (!ec && b->mixed && r && r->type == REDIS_REPLY_ERROR) {
      // Not decided: the same requests again, slot by slot (from the event loop).
      splits.fetch_add(1, std::memory_order_relaxed);
      asio::post(ex, [b, lane, flow] {
        if (flow->owner) flow->owner->resend_by_slot(lane, *b);
        else
          for (auto& w : b->waiters) std::move(w.resume)(redis::make_error_code(redis::errc::disconnected));
        --flow->in_flight[lane];
        if (flow->owner && flow->in_flight[lane] == 0) flow->owner->schedule_flush(lane);
      });
      return;
    }
    detail::read_answer(*b, ec, r, sent, flow->rtt_us, metrics);
    detail::resume_later(ex, b, scope);
    --flow->in_flight[lane];
    if (flow->owner && flow->in_flight[lane] == 0) flow->owner->schedule_flush(lane);
  };
  if (b->mixed) client_->eval_at(lane - 1, argc, std::move(args), std::move(done));
  else client_->eval(b->slot, argc, std::move(args), std::move(done));
}

void cluster_batcher::resend_by_slot(std::size_t lane, batch& b) {
  client_->refresh_soon();
  std::vector<std::unique_ptr<batch>> by_slot;
  for (auto& w : b.waiters) {
    auto it = std::find_if(by_slot.begin(), by_slot.end(), [&](const auto& x) { return x->slot == w.key_slot; });
    if (it == by_slot.end()) {
      by_slot.push_back(std::make_unique<batch>());
      by_slot.back()->slot = w.key_slot;
      it = by_slot.end() - 1;
    }
    auto at = (*it)->call.add(w.checks, w.nonce);
    (*it)->waiters.push_back({w.checks, w.out, at, std::move(w.resume), w.key_slot, w.nonce});
  }
  for (auto& one : by_slot) send_batch(lane, std::move(one));
}

void cluster_batcher::evaluate_split(std::span<const check> checks, std::string_view nonce, std::span<decision> out,
                                     handler resume) {
  auto s = std::make_shared<split>(out, nonce, std::move(resume));
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const auto slot = redis::key_slot(checks[i].key);
    auto p = std::find_if(s->parts.begin(), s->parts.end(), [&](const auto& x) { return x.slot == slot; });
    if (p == s->parts.end()) p = s->parts.insert(s->parts.end(), split::part{slot, {}, {}, {}});
    p->checks.push_back(checks[i]);
    p->index.push_back(i);
  }
  s->left = s->parts.size();
  for (std::size_t n = 0; n < s->parts.size(); ++n) {
    auto& p = s->parts[n];
    p.out.resize(p.checks.size());
    add(p.slot, p.checks, nonce, p.out, [this, s, n, flow = flow_](error_code ec) {
      s->parts[n].ec = ec;
      if (--s->left > 0) return;
      // Every slot has answered: the request's decisions, and what to give back.
      error_code first{};
      bool denied = false;
      for (auto& part : s->parts) {
        if (part.ec) {
          if (!first) first = part.ec;
          continue;
        }
        for (std::size_t j = 0; j < part.checks.size(); ++j) {
          s->out[part.index[j]] = part.out[j];
          denied = denied || (!part.out[j].allowed && !part.checks[j].cfg->shadow);
        }
      }
      if ((denied || first) && flow->owner)
        for (auto& part : s->parts)
          if (!part.ec) refund(part.slot, part.checks, part.out, s->nonce);
      std::move(s->resume)(first);
    });
  }
}

void cluster_batcher::refund(std::uint16_t slot, const std::vector<check>& checks, const std::vector<decision>& got,
                             std::string_view nonce) {
  // A slot's call recorded its admitting checks unless one of its own, not in shadow
  // mode, denied (lua/evaluate.lua): then there is nothing to give back.
  for (std::size_t j = 0; j < checks.size(); ++j)
    if (!got[j].allowed && !checks[j].cfg->shadow) return;
  std::vector<check> back(checks);
  bool any = false;
  for (std::size_t j = 0; j < back.size(); ++j) {
    if (!got[j].allowed) back[j].cost = 0;
    any = any || back[j].cost > 0;
  }
  if (!any) return;
  script_call call;
  call.add(back, nonce);
  auto [argc, args] = call.finish(script_call::mode::refund);
  refunds.fetch_add(1, std::memory_order_relaxed);
  client_->eval(slot, argc, std::move(args), [](error_code ec, const redisReply* r) {
    if (!ec && !(r && r->type == REDIS_REPLY_ERROR)) return;
    // At most one line a second, whatever fails.
    static std::atomic<std::int64_t> last{0};
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::steady_clock::now().time_since_epoch()).count();
    if (last.exchange(now) != now)
      spdlog::warn("Redis Cluster: a refund failed ({}): what it was to give back expires with its window",
                   ec ? ec.message() : std::string(r->str, r->len));
  });
}

asio::awaitable<std::tuple<error_code>> cluster_batcher::evaluate(std::span<const check> checks,
                                                                  std::string_view nonce, std::span<decision> out) {
  auto init = [this, checks, nonce, out](auto h) {
    handler resume(std::move(h));
    const auto slot = checks.empty() ? std::uint16_t{0} : redis::key_slot(checks.front().key);
    const bool one = std::all_of(checks.begin(), checks.end(),
                                 [&](const check& c) { return redis::key_slot(c.key) == slot; });
    if (one) add(slot, checks, nonce, out, std::move(resume));
    else evaluate_split(checks, nonce, out, std::move(resume));
  };
  constexpr auto token = asio::as_tuple(asio::use_awaitable);
  return asio::async_initiate<decltype(token), void(error_code)>(std::move(init), token);
}

}  // namespace fg::store
