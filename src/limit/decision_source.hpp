#pragma once
#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "limit/decision.hpp"

namespace fg::config { struct route_config; }

// The one thing a session asks about a request's limits (Envoy's limiter client is the
// model: OK / over limit / error). Behind it: the memory store, Redis (batched script
// calls), and a policy decorator that owns the deny cache, on_store_error, shadow
// limits and the rate-limited error log. The session never sees a store.
namespace fg::limit {

class decision_source;

// One request's limits, from the question to the release of its leases. Kept by the
// session and reused request after request (the strings keep their capacity).
struct limit_call {
  const config::route_config* route = nullptr;
  std::string_view client;  // the client's key, for log lines
  std::vector<check> checks;
  std::vector<decision> decisions;  // one per check, filled by the source
  // Set by the sources.
  std::uint64_t lease = 0;  // names this request's concurrency leases in the memory store
  std::int64_t now = 0;     // the memory store's clock when the limits were asked
  std::string nonce;        // names its sliding_log entries and leases in Redis
  std::string headers;      // rate-limit header lines for the answer, 429 or upstream's
  std::string body;         // a refusal's body (429, 503, 401/403 of a plan's choice)
  unsigned refusal = 0;     // with status::refused: 401, 403 or 400
  bool asked = false;       // the request's limits were built (checks are this request's)
  decision_source* holder = nullptr;  // the source holding its concurrency leases, if any
  decision_source* asked_source = nullptr;  // the source the request was asked of (post-charges go to it)
  bool decided_locally = false;             // the policy's local fallback decided it (on_store_error: local)

  // An idle connection keeps no capacity.
  void release_memory() {
    std::vector<check>().swap(checks);
    std::vector<decision>().swap(decisions);
    std::string().swap(nonce);
    std::string().swap(headers);
    std::string().swap(body);
  }
};

enum class status {
  ok,          // go on (allowed, or the policy lets it through)
  over_limit,  // answer the route's 429 with call.headers
  error,       // the store failed and on_store_error is deny: answer 503
  pending,     // ask again with wait() and finish()
  refused,     // the limits' inputs refused the request (limit_call::refusal: 401/403 of a plan's
               // choice, 400 of a cost header); no store asked
};

class decision_source {
 public:
  virtual ~decision_source() = default;
  // Decides at once where it can (memory, the deny cache); else pending.
  virtual status start(limit_call& c) = 0;
  // After pending: the store's answer, awaited with no coroutine frame of its own.
  virtual boost::asio::awaitable<std::tuple<boost::system::error_code>> wait(limit_call& c);
  // After wait(), with its error.
  virtual status finish(limit_call& c, boost::system::error_code ec);
  // Gives back the call's concurrency leases (called through holder).
  virtual void release(limit_call& c) = 0;
  // While a tunnel lasts, its leases' lifetimes start again (called through holder).
  virtual void renew(limit_call& c) = 0;
  // The call failed and its answer may have been lost after the store ran it (a timeout,
  // a connection lost mid-reply): gives back the concurrency leases it may have taken,
  // which nobody would release. Best effort, not waited for; a no-op where none was.
  virtual void release_unanswered(limit_call& c) {}
  // Adds `amount` to check i's key after the request was decided (a post-charge: a
  // response's cost, the rest of a chunked body), not waited for; the balance may go
  // past the limit. Only for a call this source decided.
  virtual void charge(const limit_call& c, std::size_t i, std::uint64_t amount) {}
  // The recent round trip to the store, in whole ms (0 for memory).
  virtual std::int64_t round_trip_ms() const { return 0; }
};

// Gives back a call's concurrency leases when it goes out of scope: a request that
// ends in any way, a throw included, holds none afterwards.
class lease_guard {
 public:
  explicit lease_guard(limit_call& c) : c_(c) {}
  ~lease_guard() { release(c_); }
  lease_guard(const lease_guard&) = delete;
  lease_guard& operator=(const lease_guard&) = delete;
  static void release(limit_call& c) {
    if (auto* h = std::exchange(c.holder, nullptr)) h->release(c);
  }

 private:
  limit_call& c_;
};

// How often a held call's leases are renewed while a tunnel lasts: a third of the
// shortest lease lifetime, at least 10 ms (0: no lease held).
std::int64_t renewal_interval_ms(const limit_call& c);
// Whether check i holds a concurrency lease (an allowed concurrency check).
bool holds_lease(const limit_call& c, std::size_t i);
// The most a body of unknown size (chunked) may bring under the call's byte quotas
// (cost: body_bytes, enforced): what each one's decision left, with the 1 it took up
// front; the largest number where there is none, or where no store decided (the
// failure policy let the request through).
std::uint64_t body_bytes_left(const limit_call& c);
// A chunked body that brought `bytes`, more than body_bytes_left allowed: each byte
// quota it passed becomes a denial (nothing left, a retry at its reset), so that the
// answer is the route's refusal, with its rate-limit fields.
void deny_over_body_quota(limit_call& c, std::uint64_t bytes);

// What the decisions of a call that the store answered come to: over_limit when a limit
// not in shadow mode denies, else ok (and then `source` holds the call's leases).
status judged(limit_call& c, decision_source* source);

}  // namespace fg::limit
