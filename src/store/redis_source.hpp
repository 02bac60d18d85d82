#pragma once
#include <string>

#include "limit/decision_source.hpp"

namespace fg::store {

using limit::decision_source;
using limit::limit_call;
using limit::status;

class redis_evaluator;

// Decisions from Redis: one script call for the requests of an event-loop turn (see
// redis_batcher). Per worker; `nonce_prefix` is random per process.
class redis_source final : public decision_source {
 public:
  redis_source(redis_evaluator& batcher, std::string nonce_prefix);
  status start(limit_call& c) override;
  boost::asio::awaitable<std::tuple<boost::system::error_code>> wait(limit_call& c) override;
  status finish(limit_call& c, boost::system::error_code ec) override;
  void release(limit_call& c) override;
  void release_unanswered(limit_call& c) override;
  void renew(limit_call& c) override;
  void charge(const limit_call& c, std::size_t i, std::uint64_t amount) override;
  std::int64_t round_trip_ms() const override;
  // Lets go of the batcher (the worker is shutting down): releases and renewals are
  // dropped from now on, and nothing more is asked.
  void detach() { batcher_ = nullptr; }

 private:
  redis_evaluator* batcher_;
  std::string nonce_prefix_;
};

}  // namespace fg::store
