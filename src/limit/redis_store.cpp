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
  append_number(shapes_, specs.size());
  for (auto s : specs) append_number(shapes_, s);
  shape_args_ += 1 + specs.size();
  return shape_ids_.size();
}

void script_call::add(std::span<const check> checks, std::string_view nonce) {
  ++requests_;
  scratch_.clear();
  bool named = false;  // a limit names its entries after the request's nonce
  for (const auto& c : checks) {
    redis::append_bulk(keys_, c.key);
    ++keys_count_;
    scratch_.push_back(spec_index(c));
    named |= c.cfg->algo == config::algorithm::sliding_log || c.cfg->algo == config::algorithm::concurrency;
  }
  append_number(per_request_, shape_index(scratch_));
  ++per_request_args_;
  if (named) {
    redis::append_bulk(per_request_, nonce);
    ++per_request_args_;
  }
}

std::pair<std::size_t, std::string> script_call::finish() && {
  std::string out;
  out.reserve(keys_.size() + specs_.size() + shapes_.size() + per_request_.size() + 64);
  append_number(out, keys_count_);
  out += keys_;
  append_number(out, requests_);
  append_number(out, spec_ids_.size());
  append_number(out, shape_ids_.size());
  out += specs_;
  out += shapes_;
  out += per_request_;
  return {1 + keys_count_ + 3 + 6 * spec_ids_.size() + shape_args_ + per_request_args_, std::move(out)};
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
    out[i].limit = config::rate_based(l) ? l.burst : l.limit;
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
    boost::asio::any_completion_handler<void(boost::system::error_code)> resume;
    boost::system::error_code ec{};
  };
  script_call call;
  std::vector<waiter> waiters;
};

redis_batcher::redis_batcher(boost::asio::any_io_executor ex, std::shared_ptr<redis::connection> c,
                             std::size_t max_batch)
    : ex_(std::move(ex)), conn_(std::move(c)), max_batch_(max_batch) {}

redis_batcher::~redis_batcher() = default;

void redis_batcher::flush() {
  if (!current_ || current_->waiters.empty()) return;
  auto b = std::shared_ptr<batch>(std::move(current_));
  auto [argc, args] = std::move(b->call).finish();
  conn_->eval(argc, std::move(args), [b, ex = ex_](boost::system::error_code ec, const redisReply* r) {
    std::size_t offset = 0;
    for (auto& w : b->waiters) {
      w.ec = ec;
      if (!ec && !decode_reply(r, offset, w.checks, w.out)) w.ec = redis::make_error_code(redis::errc::protocol);
      offset += w.out.size();
    }
    // The requests go on from the event loop, not from inside hiredis' callback.
    boost::asio::post(ex, [b] {
      for (auto& w : b->waiters) std::move(w.resume)(w.ec);
    });
  });
}

boost::asio::awaitable<std::tuple<boost::system::error_code>> redis_batcher::evaluate(
    std::span<const check> checks, std::string_view nonce, std::span<decision> out) {
  auto init = [this, checks, nonce, out](auto handler) {
    if (!current_) current_ = std::make_unique<batch>();
    current_->call.add(checks, nonce);
    current_->waiters.push_back({checks, out, std::move(handler)});
    if (current_->waiters.size() >= max_batch_) {
      flush();
    } else if (!flush_posted_) {
      // Everything that becomes ready in this turn of the event loop joins the batch.
      flush_posted_ = true;
      boost::asio::post(ex_, [this] {
        flush_posted_ = false;
        flush();
      });
    }
  };
  // Not a coroutine itself: the caller awaits the operation, with no frame in between.
  constexpr auto token = boost::asio::as_tuple(boost::asio::use_awaitable);
  return boost::asio::async_initiate<decltype(token), void(boost::system::error_code)>(std::move(init), token);
}

}  // namespace fg::limit
