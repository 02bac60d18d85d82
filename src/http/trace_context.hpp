#pragma once
// W3C Trace Context (Level 1) on the way upstream: a request's `traceparent` read when
// its sender is trusted to name the trace, else a new trace begun; what the upstream is
// sent names the gateway's own span as its parent. Pure: no I/O, no clock.
#include <optional>
#include <string>
#include <string_view>

namespace fg::http {

// A traceparent's parts (lower-case hex, as sent).
struct trace_parent {
  std::string_view trace_id;   // 32 hex digits, not all zero
  std::string_view parent_id;  // 16 hex digits, not all zero
  bool sampled = false;        // the flags' sampled bit
};

// A traceparent value (RFC-style grammar of W3C Trace Context §3.2): version 00 exactly
// 55 characters; a later version (not ff) read by its first 55 when a '-' or nothing
// follows them. nullopt for anything else (the header is then ignored, §3.2.2.1).
std::optional<trace_parent> parse_traceparent(std::string_view value);

// The traceparent sent upstream, written to `out` (55 characters): the incoming trace
// continued when `incoming` is set, else a new one (sampled with probability
// `sample_ratio`), under a new span id of the gateway's.
void make_traceparent(const std::optional<trace_parent>& incoming, double sample_ratio, std::string& out);

// The trace id in a traceparent made by make_traceparent.
inline std::string_view trace_id_of(std::string_view traceparent) { return traceparent.substr(3, 32); }

}  // namespace fg::http
