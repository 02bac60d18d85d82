#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include <string_view>

#include "config/config.hpp"
#include "limit/decision.hpp"

namespace fg::limit {

// What a key source reads from a request.
struct request_parts {
  std::string_view client;  // the resolved client key ("1.2.3.4", "2001:db8::/64")
  std::string_view query;   // the target's query, without '?'
  std::string_view client_cert;  // the verified client certificate's subject ("" = none)
  // Header lookup: the first value of a header, or nullopt.
  std::optional<std::string_view> (*header)(const void* ctx, std::string_view name) = nullptr;
  const void* header_ctx = nullptr;
  // The request body: its Content-Length, or chunked (a size known once it is read).
  std::uint64_t body_length = 0;
  bool chunked = false;
};

// A request's cost for limit `l`: its `cost`, a request header's number, or the body's
// size (chunked: 1 now, the rest charged once read); nullopt when the header's value is
// no whole number from 0 to 1e9 (the request is refused with 400). A cost of 0 makes no
// check (build_checks), unless the limit is charged after the response: then 1.
std::optional<std::uint64_t> request_cost(const config::limit_config& l, const request_parts& r);

// The Redis/memory key of one limit for one request:
//   <prefix>{<route>:<limit>:<identity>}
// The braces are a Redis Cluster hash tag: every key a script touches for one limit
// and one client lives in one slot. Identity parts are joined with '|'; characters
// that could confuse the key ('{', '}', ':', '|', '%', space, control, non-ASCII)
// are percent-encoded, and an identity over 200 bytes is replaced by a 128-bit hash.
// A missing source yields nullopt when the limit says `skip`, and the marker "%anon"
// (which no encoded value can equal) when it says `anonymous`.
// On a Redis Cluster (`cluster`), the tag is the route and the identity only:
//   <prefix>{<route>:<identity>}:<limit>
// so that a route's limits on one identity share a slot (one atomic script call), and
// per-client keys spread over every master (docs/architecture.md, "Redis Cluster").
std::optional<std::string> build_key(std::string_view prefix, std::string_view route, const config::limit_config& l,
                                     const request_parts& r, bool cluster = false);
// The same into `out` (its capacity reused); false where the other returns nullopt.
bool build_key(std::string& out, std::string_view prefix, std::string_view route, const config::limit_config& l,
               const request_parts& r, bool cluster = false);
// Whether `cfg`'s keys take the cluster form.
inline bool cluster_keys(const config::config& cfg) {
  return cfg.store == config::store_kind::redis && cfg.redis.mode == config::redis_mode::cluster;
}

struct consumer_maps;

// A limit's plan for one request (plans: from a request's plan name or its consumer's
// key): its numbers (an unlimited plan is not checked), or, with null, the status
// refusing the request where plans.unknown is reject (401: no key or plan name, 403: one
// not known).
struct plan_pick {
  const config::limit_config* plan = nullptr;
  unsigned refuse = 0;
};
plan_pick pick_plan(const config::limit_config& l, const request_parts& r, const consumer_maps* consumers,
                    std::string& scratch);

// The checks of `route`'s limits for one request, into `checks` (whose key strings keep
// their capacity from request to request); a limit whose key part is missing is skipped
// (on_missing_key: skip), and so are an unlimited plan and a cost of 0. 0, or the status
// the request is refused with: a plan's choice's 401/403, a cost header's 400 (the first
// of them); the limit that refuses has no check, and of the others only those keyed on
// the address, a certificate or nothing keep theirs: a refused request still counts
// against them (guessing API keys is limited per address), but makes no store key of
// what it sent.
unsigned build_checks(std::vector<check>& checks, std::string_view prefix, const config::route_config& route,
                      const request_parts& r, bool cluster = false, const consumer_maps* consumers = nullptr);

// Whether build_checks makes the same checks for every request of one client on
// `route` (within one config): each limit keyed by the client's address, nothing else
// or nothing at all (global), at a fixed cost, without plans. A session keeps such
// checks for its client's next request instead of building the keys again.
bool checks_follow_client(const config::route_config& route);

// `name`'s raw value in a query string ("a=1&b=2"; names compared percent-decoded) or a
// Cookie header ("a=1; b=2"); the first if there are several.
std::optional<std::string_view> query_param(std::string_view query, std::string_view name);
std::optional<std::string_view> cookie_value(std::string_view cookie_header, std::string_view name);

// What one key source reads from a request ("*" for global; query and cookie values
// percent-decoded, into `scratch` where they need it); nullopt when it is missing or empty.
std::optional<std::string_view> source_value(const config::key_source& src, const request_parts& r, std::string& scratch);

// Percent-encodes what could confuse a key (see build_key).
void append_encoded(std::string& out, std::string_view value);

}  // namespace fg::limit
