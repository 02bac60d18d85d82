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

// The trace id in a traceparent made by make_traceparent, its span (parent) id, and
// whether it is sampled.
inline std::string_view trace_id_of(std::string_view traceparent) { return traceparent.substr(3, 32); }
inline std::string_view span_id_of(std::string_view traceparent) { return traceparent.substr(36, 16); }
inline bool sampled_of(std::string_view traceparent) {
  const char f = traceparent[54];  // (the flags' low digit: 1 is the sampled bit)
  return (f >= '0' && f <= '9' ? f - '0' : f - 'a' + 10) & 1;
}

// A new span id: 16 hex digits of a random value, never all zero.
void make_span_id(char* out16);

// In `head` (a request head being sent upstream), the span id of the traceparent
// `traceparent` begins (the first 36 characters: its version and trace id) made
// `span_id` (16 characters): the span the upstream's is a child of. False: none there.
bool restate_parent(std::string& head, std::string_view traceparent, std::string_view span_id);

}  // namespace fg::http
