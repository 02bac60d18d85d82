#pragma once
#include <span>
#include <string>
#include <vector>

#include "limit/decision.hpp"
#include "limit/memory_store.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <functional>
#include <memory>

namespace fg::redis { struct reply; class connection; }

namespace fg::limit {

// Appends one request to the KEYS and ARGV of a limiter-script call (lua/evaluate.lua:
// ARGV[1], the number of requests, is the caller's).
void append_request(std::span<const check> checks, std::string_view nonce, std::vector<std::string>& keys,
                    std::vector<std::string>& args);
// Reads 5 integers per decision from `r`, starting at element `offset`; false when the
// reply is not what the script returns.
bool decode_reply(const redis::reply& r, std::size_t offset, std::span<decision> out);

// Batches the limit checks of concurrent requests on one worker into one script call
// per event-loop turn (at most `max_batch` requests), so that Redis runs the script
// once for many requests. Each request's limits stay atomic in the script. Per worker.
class redis_batcher {
 public:
  redis_batcher(boost::asio::any_io_executor ex, std::shared_ptr<redis::connection> c, std::size_t max_batch = 64);
  // Evaluates `checks`; `out` (one decision per check) is filled before completion.
  boost::asio::awaitable<boost::system::error_code> evaluate(std::span<const check> checks, std::string_view nonce,
                                                             std::span<decision> out);

 private:
  struct entry {
    std::span<decision> out;
    std::function<void(boost::system::error_code)> done;
  };
  struct batch {
    std::vector<std::string> keys, args{"0"};
    std::vector<entry> entries;
  };
  void add(std::span<const check> checks, std::string_view nonce, std::span<decision> out,
           std::function<void(boost::system::error_code)> done);
  void flush();

  boost::asio::any_io_executor ex_;
  std::shared_ptr<redis::connection> conn_;
  std::size_t max_batch_;
  std::unique_ptr<batch> current_;
  bool flush_posted_ = false;
};
// The member of a concurrency lease held for check `index` (0-based) of a call.
std::string lease_member(std::string_view nonce, std::size_t index);

// Per-worker memory of recent denials: a key denied until T is denied locally until T
// without asking Redis (a flood from one client costs Redis nothing). Bounded.
class deny_cache {
 public:
  explicit deny_cache(std::size_t max_entries = 100'000) : max_(max_entries) {}
  // Until when `key` is known to be denied (0: not known).
  std::int64_t denied_until(const std::string& key, std::int64_t now);
  void remember(const std::string& key, std::int64_t until);

 private:
  std::unordered_map<std::string, std::int64_t> map_;
  std::size_t max_;
};

}  // namespace fg::limit
