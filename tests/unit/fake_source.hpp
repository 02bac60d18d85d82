#pragma once
// A decision source that answers what a test says, for the tests of what sits on one
// (the policy decorator, the session): denials of the limits named in `deny` (retry
// `retry_ms`), or an error; it counts what it is asked, the leases it hands out and
// those given back.
#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "config/config.hpp"
#include "limit/decision_source.hpp"

namespace fg::test {

class fake_source final : public limit::decision_source {
 public:
  bool remote = true;  // answers through wait()/finish(), as Redis does
  boost::system::error_code fail;
  std::vector<std::string> deny;
  std::int64_t retry_ms = 5000;
  std::int64_t delay_ms = 0;  // an allowed decision's wait for its turn (on_exceed: delay)
  int starts = 0, releases = 0, holds = 0, unanswered = 0;

  limit::status start(limit::limit_call& c) override {
    ++starts;
    if (!remote) return answer(c, {});
    return limit::status::pending;
  }
  boost::asio::awaitable<std::tuple<boost::system::error_code>> wait(limit::limit_call&) override {
    co_return std::tuple{fail};
  }
  limit::status finish(limit::limit_call& c, boost::system::error_code ec) override { return answer(c, ec); }
  void release(limit::limit_call&) override { ++releases; }
  void release_unanswered(limit::limit_call&) override { ++unanswered; }
  void renew(limit::limit_call&) override {}
  std::int64_t round_trip_ms() const override { return 1; }

 private:
  limit::status answer(limit::limit_call& c, boost::system::error_code ec) {
    if (ec) return limit::status::error;
    c.decisions.resize(c.checks.size());
    for (std::size_t i = 0; i < c.checks.size(); ++i) {
      bool denied = std::find(deny.begin(), deny.end(), c.checks[i].cfg->name) != deny.end();
      c.decisions[i] = {!denied, c.checks[i].cfg->limit, denied ? 0u : 1u, 1000, denied ? retry_ms : delay_ms};
    }
    auto s = limit::judged(c, this);
    if (c.holder == this) ++holds;
    return s;
  }
};

}  // namespace fg::test
