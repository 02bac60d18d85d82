#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "limit/decision.hpp"

namespace fg::limit {

// The state of one limit key, for every algorithm (only the fields it uses are set).
// The in-memory twin of what the Lua scripts keep in Redis; time is in milliseconds.
struct key_state {
  std::int64_t expires_at = 0;      // the whole key is gone at this time (like a Redis TTL)
  std::int64_t count = 0;           // fixed_window: admitted cost; sliding_window: current bucket;
                                    // gcra: the time its TAT is kept relative to
  std::int64_t previous = 0;        // sliding_window: previous bucket
  std::int64_t bucket = -1;         // sliding_window: index of the current bucket
  std::int64_t origin = 0;          // sliding_window: where bucket 0 starts (the key's first request)
  double tokens = 0;                // token_bucket
  double stamp = 0;                 // token_bucket: last refill time; gcra: theoretical arrival
                                    // time (TAT), less `count`
  std::vector<std::int64_t> log;    // sliding_log: admission times, oldest first (one per unit of cost)
  std::vector<std::pair<std::uint64_t, std::int64_t>> leases;  // concurrency: (lease id, expiry)
};

// Evaluates one request of `cost` against `s` at time `now`. With `commit` the
// admission is recorded; without, `s` is only cleaned of what has expired. A denied
// request never records anything. `lease` is the concurrency lease id to record.
decision evaluate(const config::limit_config& cfg, key_state& s, std::int64_t now, std::uint64_t cost, bool commit,
                  std::uint64_t lease = 0);

// Adds `amount` (at most the limit's quota) to a key's count after the fact (a
// post-charge: a response's cost, the rest of a chunked body's), with no decision: the
// balance may go past the limit. A key that has expired since (a token bucket refilled,
// a window ended) is begun afresh and charged, as the Lua twin's give with a negative
// cost does.
// For fixed_window, sliding_window, token_bucket and gcra (config::takes_any_cost).
void charge(const config::limit_config& cfg, key_state& s, std::int64_t now, std::uint64_t amount);

// Gives back up to `amount` of what a live key's client has used (the admin's grant: a
// partial reset), never more than it used: fixed_window and sliding_window lower the
// current count (not below 0), token_bucket adds tokens (up to the burst), gcra moves
// the TAT back (a key back at or before now is as if never used: it expires). The
// in-memory twin of the Lua algorithms' give. A key that has expired is left alone.
// For fixed_window, sliding_window, token_bucket and gcra (config::takes_any_cost).
void give(const config::limit_config& cfg, key_state& s, std::int64_t now, std::uint64_t amount);

// Gives back a concurrency lease (when the response is done or the client went away).
void release_lease(key_state& s, std::uint64_t lease);

}  // namespace fg::limit
