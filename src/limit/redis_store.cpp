#include "limit/redis_store.hpp"

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>

#include "redis/connection.hpp"

namespace fg::limit {

namespace {
const char* code(config::algorithm a) {
  switch (a) {
    case config::algorithm::fixed_window: return "fw";
    case config::algorithm::sliding_log: return "sl";
    case config::algorithm::sliding_window: return "sw";
    case config::algorithm::token_bucket: return "tb";
    case config::algorithm::gcra: return "gcra";
    case config::algorithm::concurrency: return "cc";
  }
  return "fw";
}

void append_number(std::string& out, std::uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  redis::append_bulk(out, std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
}

}  // namespace

std::size_t script_call::spec_index(const check& c) {
  for (std::size_t i = 0; i < spec_ids_.size(); ++i)
    if (spec_ids_[i].first == c.cfg && spec_ids_[i].second == c.cost) return i + 1;
  spec_ids_.emplace_back(c.cfg, c.cost);
  const auto& l = *c.cfg;
  redis::append_bulk(specs_, code(l.algo));
  if (config::rate_based(l)) {
    append_number(specs_, l.rate_.count);
    append_number(specs_, static_cast<std::uint64_t>(l.rate_.per.count()));
    append_number(specs_, l.burst);
  } else {
    append_number(specs_, l.limit);
    append_number(specs_, static_cast<std::uint64_t>(l.window.count()));
    append_number(specs_, 0);
  }
  append_number(specs_, c.cost);
  redis::append_bulk(specs_, l.shadow ? "1" : "0");
  return spec_ids_.size();
}

std::size_t script_call::shape_index(std::span<const std::size_t> specs) {
  for (std::size_t i = 0; i < shape_ids_.size(); ++i)
    if (std::ranges::equal(shape_ids_[i], specs)) return i + 1;
  shape_ids_.emplace_back(specs.begin(), specs.end());
  shape_named_.push_back(
      std::ranges::any_of(specs, [&](std::size_t i) { return config::names_entries(*spec_ids_[i - 1].first); }));
  append_number(shapes_, specs.size());
  for (auto i : specs) append_number(shapes_, i);
  shape_args_ += 1 + specs.size();
  return shape_ids_.size();
}

script_call::slot script_call::add(std::span<const check> checks, std::string_view nonce) {
  ++requests_;
  scratch_.clear();
  std::size_t hash = 0;
  for (const auto& c : checks) {
    scratch_.push_back(spec_index(c));
    hash = hash * 31 + std::hash<std::string_view>{}(c.key);
  }
  auto shape = shape_index(scratch_);
  if (shape_named_[shape - 1]) {
    entries_.push_back({shape, checks, nonce, hash});
    return {entries_.size() - 1, 0};
  }
  for (std::size_t e = 0; e < entries_.size(); ++e) {
    auto& en = entries_[e];
    if (en.hash != hash || en.shape != shape) continue;
    if (!std::ranges::equal(en.checks, checks, [](const check& x, const check& y) { return x.key == y.key; }))
      continue;
    return {e, en.count++};
  }
  entries_.push_back({shape, checks, {}, hash});
  return {entries_.size() - 1, 0};
}

std::pair<std::size_t, std::string> script_call::finish() {
  std::string keys, per_entry;
  std::size_t keys_count = 0, per_entry_args = 0, offset = 0;
  for (auto& en : entries_) {
    for (const auto& c : en.checks) redis::append_bulk(keys, c.key);
    keys_count += en.checks.size();
    append_number(per_entry, en.shape);
    append_number(per_entry, en.count);
    per_entry_args += 2;
    if (shape_named_[en.shape - 1]) {
      redis::append_bulk(per_entry, en.nonce);
      ++per_entry_args;
    }
    en.offset = offset;
    offset += en.count * en.checks.size();
  }
  std::string out;
  out.reserve(keys.size() + specs_.size() + shapes_.size() + per_entry.size() + 64);
  append_number(out, keys_count);
  out += keys;
  append_number(out, entries_.size());
  append_number(out, spec_ids_.size());
  append_number(out, shape_ids_.size());
  out += specs_;
  out += shapes_;
  out += per_entry;
  return {1 + keys_count + 3 + 6 * spec_ids_.size() + shape_args_ + per_entry_args, std::move(out)};
}

bool decode_reply(const redisReply* r, std::size_t offset, std::span<const check> checks, std::span<decision> out) {
  // Per limit 4 little-endian 64-bit integers: allowed, remaining, reset_ms, retry_ms.
  constexpr std::size_t width = 32;
  if (!r || r->type != REDIS_REPLY_STRING || r->len < (offset + out.size()) * width) return false;
  auto field = [&](std::size_t i, std::size_t j) {
    const auto* p = reinterpret_cast<const unsigned char*>(r->str) + (offset + i) * width + j * 8;
    std::uint64_t v = 0;
    for (int b = 7; b >= 0; --b) v = (v << 8) | p[b];
    return static_cast<std::int64_t>(v);
  };
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto& l = *checks[i].cfg;
    out[i].allowed = field(i, 0) == 1;
    out[i].limit = config::quota(l);
    out[i].remaining = static_cast<std::uint64_t>(std::max<std::int64_t>(0, field(i, 1)));
    out[i].reset_ms = field(i, 2);
    out[i].retry_ms = field(i, 3);
  }
  return true;
}

std::string lease_member(std::string_view nonce, std::size_t index) {
  return std::string(nonce) + ":" + std::to_string(index + 1);
}

std::int64_t deny_cache::denied_until(const std::string& key, std::int64_t now) {
  auto it = map_.find(key);
  if (it == map_.end()) return 0;
  if (it->second <= now) {
    map_.erase(it);
    return 0;
  }
  return it->second;
}

void deny_cache::remember(const std::string& key, std::int64_t until) {
  if (map_.size() >= max_) map_.clear();
  map_[key] = until;
}

struct redis_batcher::batch {
  struct waiter {
    std::span<const check> checks;
    std::span<decision> out;
    script_call::slot slot;
    boost::asio::any_completion_handler<void(boost::system::error_code)> resume;
    boost::system::error_code ec{};
  };
  script_call call;
  std::vector<waiter> waiters;
};

redis_batcher::redis_batcher(boost::asio::any_io_executor ex, std::shared_ptr<redis::connection> c,
                             std::size_t max_batch)
    : ex_(std::move(ex)), conn_(std::move(c)), max_batch_(max_batch), flow_(std::make_shared<flow>()) {
  flow_->owner = this;
}

redis_batcher::~redis_batcher() { flow_->owner = nullptr; }

void redis_batcher::flush() {
  if (!current_ || current_->waiters.empty()) return;
  auto b = std::shared_ptr<batch>(std::move(current_));
  auto [argc, args] = b->call.finish();
  ++flow_->in_flight;
  conn_->eval(argc, std::move(args), [b, ex = ex_, flow = flow_](boost::system::error_code ec, const redisReply* r) {
    for (auto& w : b->waiters) {
      w.ec = ec;
      if (!ec && !decode_reply(r, b->call.offset(w.slot), w.checks, w.out))
        w.ec = redis::make_error_code(redis::errc::protocol);
    }
    // The requests go on from the event loop, not from inside hiredis' callback.
    boost::asio::post(ex, [b] {
      for (auto& w : b->waiters) std::move(w.resume)(w.ec);
    });
    --flow->in_flight;
    if (flow->owner) flow->owner->schedule_flush();
  });
}

void redis_batcher::schedule_flush() {
  // One call in flight at a time: what arrives meanwhile waits for its answer and
  // goes in the next call, so calls grow with the load instead of multiplying.
  if (flush_posted_ || flow_->in_flight >= max_in_flight || !current_ || current_->waiters.empty()) return;
  flush_posted_ = true;
  // At the end of this turn of the event loop: every request that becomes ready in
  // it joins the call.
  boost::asio::post(ex_, [this] {
    flush_posted_ = false;
    if (flow_->in_flight < max_in_flight) flush();
  });
}

boost::asio::awaitable<std::tuple<boost::system::error_code>> redis_batcher::evaluate(
    std::span<const check> checks, std::string_view nonce, std::span<decision> out) {
  auto init = [this, checks, nonce, out](auto handler) {
    if (!current_) current_ = std::make_unique<batch>();
    auto slot = current_->call.add(checks, nonce);
    current_->waiters.push_back({checks, out, slot, std::move(handler)});
    if (current_->waiters.size() >= max_batch_) flush();  // full: goes now, in flight or not
    else schedule_flush();
  };
  // Not a coroutine itself: the caller awaits the operation, with no frame in between.
  constexpr auto token = boost::asio::as_tuple(boost::asio::use_awaitable);
  return boost::asio::async_initiate<decltype(token), void(boost::system::error_code)>(std::move(init), token);
}

}  // namespace fg::limit
