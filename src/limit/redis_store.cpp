#include "limit/redis_store.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "redis/connection.hpp"
#include "redis/reply.hpp"

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
}  // namespace

void append_request(std::span<const check> checks, std::string_view nonce, std::vector<std::string>& keys,
                    std::vector<std::string>& args) {
  args.emplace_back(nonce);
  args.push_back(std::to_string(checks.size()));
  for (const auto& c : checks) {
    const auto& l = *c.cfg;
    keys.push_back(c.key);
    args.emplace_back(code(l.algo));
    if (config::rate_based(l)) {
      args.push_back(std::to_string(l.rate_.count));
      args.push_back(std::to_string(l.rate_.per.count()));
      args.push_back(std::to_string(l.burst));
    } else {
      args.push_back(std::to_string(l.limit));
      args.push_back(std::to_string(l.window.count()));
      args.emplace_back("0");
    }
    args.push_back(std::to_string(c.cost));
    args.emplace_back(l.shadow ? "1" : "0");
  }
}

bool decode_reply(const redis::reply& r, std::size_t offset, std::span<decision> out) {
  if (r.type != redis::reply::kind::array || r.elements.size() < offset + out.size() * 5) return false;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto* e = &r.elements[offset + i * 5];
    for (int j = 0; j < 5; ++j)
      if (e[j].type != redis::reply::kind::integer) return false;
    out[i].allowed = e[0].integer == 1;
    out[i].limit = static_cast<std::uint64_t>(std::max<std::int64_t>(0, e[1].integer));
    out[i].remaining = static_cast<std::uint64_t>(std::max<std::int64_t>(0, e[2].integer));
    out[i].reset_ms = e[3].integer;
    out[i].retry_ms = e[4].integer;
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

redis_batcher::redis_batcher(boost::asio::any_io_executor ex, std::shared_ptr<redis::connection> c,
                             std::size_t max_batch)
    : ex_(std::move(ex)), conn_(std::move(c)), max_batch_(max_batch) {}

void redis_batcher::add(std::span<const check> checks, std::string_view nonce, std::span<decision> out,
                        std::function<void(boost::system::error_code)> done) {
  if (!current_) current_ = std::make_unique<batch>();
  append_request(checks, nonce, current_->keys, current_->args);
  current_->entries.push_back({out, std::move(done)});
  if (current_->entries.size() >= max_batch_) {
    flush();
  } else if (!flush_posted_) {
    // Everything that becomes ready in this turn of the event loop joins the batch.
    flush_posted_ = true;
    boost::asio::post(ex_, [this] {
      flush_posted_ = false;
      flush();
    });
  }
}

void redis_batcher::flush() {
  if (!current_ || current_->entries.empty()) return;
  auto b = std::shared_ptr<batch>(std::move(current_));
  b->args[0] = std::to_string(b->entries.size());
  auto run = [conn = conn_, b]() -> boost::asio::awaitable<void> {
    auto [ec, reply] = co_await conn->eval(b->keys, b->args);
    std::size_t offset = 0;
    for (auto& e : b->entries) {
      auto result = ec;
      if (!result && (reply.is_error() || !decode_reply(reply, offset, e.out)))
        result = redis::make_error_code(redis::errc::protocol);
      offset += e.out.size() * 5;
      e.done(result);
    }
  };
  boost::asio::co_spawn(ex_, run, boost::asio::detached);
}

boost::asio::awaitable<boost::system::error_code> redis_batcher::evaluate(std::span<const check> checks,
                                                                        std::string_view nonce,
                                                                        std::span<decision> out) {
  auto init = [this, checks, nonce, out](auto handler) {
    auto h = std::make_shared<decltype(handler)>(std::move(handler));
    add(checks, nonce, out, [h, ex = ex_](boost::system::error_code ec) {
      boost::asio::post(ex, [h, ec] { (*h)(ec); });
    });
  };
  constexpr auto token = boost::asio::as_tuple(boost::asio::use_awaitable);
  auto [ec] = co_await boost::asio::async_initiate<decltype(token), void(boost::system::error_code)>(init, token);
  co_return ec;
}

}  // namespace fg::limit
