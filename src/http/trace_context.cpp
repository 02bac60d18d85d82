#include "http/trace_context.hpp"

#include <cstdint>

#include "util/random.hpp"

namespace fg::http {

namespace {

bool lower_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool all_zero(std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; }

int hex_value(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

// 16 hex digits of a random value, never all zero (an all-zero id is invalid).
void append_hex64(std::string& out) {
  char id[16];
  make_span_id(id);
  out.append(id, 16);
}

}  // namespace

void make_span_id(char* out16) {
  static constexpr char hex[] = "0123456789abcdef";
  std::uint64_t v = 0;
  while (v == 0) v = util::unique_random();
  for (int i = 0, shift = 60; shift >= 0; ++i, shift -= 4) out16[i] = hex[(v >> shift) & 0xf];
}

bool restate_parent(std::string& head, std::string_view traceparent, std::string_view span_id) {
  if (traceparent.size() < 52 || span_id.size() != 16) return false;
  // (from the end: the gateway's traceparent comes after every field of the client's)
  const auto at = head.rfind(traceparent.substr(0, 36));
  if (at == std::string::npos || at + 52 > head.size()) return false;
  head.replace(at + 36, 16, span_id);
  return true;
}

std::optional<trace_parent> parse_traceparent(std::string_view v) {
  // version "-" trace-id "-" parent-id "-" flags
  if (v.size() < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-') return std::nullopt;
  const auto version = v.substr(0, 2), trace = v.substr(3, 32), parent = v.substr(36, 16), flags = v.substr(53, 2);
  if (!lower_hex(version) || version == "ff" || !lower_hex(trace) || !lower_hex(parent) || !lower_hex(flags))
    return std::nullopt;
  if (version == "00" ? v.size() != 55 : v.size() > 55 && v[55] != '-') return std::nullopt;
  if (all_zero(trace) || all_zero(parent)) return std::nullopt;
  return trace_parent{trace, parent, (hex_value(flags[1]) & 1) != 0};
}

void make_traceparent(const std::optional<trace_parent>& incoming, double sample_ratio, std::string& out) {
  out.assign("00-");
  bool sampled;
  if (incoming) {
    out.append(incoming->trace_id);
    sampled = incoming->sampled;
  } else {
    append_hex64(out);
    append_hex64(out);
    // (53 random bits against the ratio: 0 never, 1 always)
    sampled = static_cast<double>(util::unique_random() >> 11) * 0x1.0p-53 < sample_ratio;
  }
  out.push_back('-');
  append_hex64(out);
  out.append(sampled ? "-01" : "-00");
}

}  // namespace fg::http
