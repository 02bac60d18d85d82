#pragma once

namespace fg::store {
// The limiter script (lua/prelude.lua, the six algorithms, lua/evaluate.lua), embedded at build time.
extern const char* const limiter_script;
// A concurrency lease's renewal (lua/renew_lease.lua), embedded the same way.
extern const char* const renew_lease_script;
// The same for Redis Cluster nodes: with Redis 7's allow-cross-slot-keys flag, so that
// one call may carry (in ARGV) the keys of many slots that one node serves.
inline constexpr const char* cluster_script_flags = "#!lua flags=allow-cross-slot-keys\n";
}  // namespace fg::store
