#include "limit/headers.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <string_view>

namespace fg::limit {

std::int64_t ceil_seconds(std::int64_t ms) { return ms <= 0 ? 0 : (ms + 999) / 1000; }

namespace {

// The policy window in seconds: the limit's window, or the rate's period.
std::int64_t window_seconds(const config::limit_config& l) {
  return ceil_seconds(config::rate_based(l) ? l.rate_.per.count() * static_cast<std::int64_t>(l.burst) /
                                       static_cast<std::int64_t>(std::max<std::uint64_t>(1, l.rate_.count))
                                 : l.window.count());
}

}  // namespace

namespace {

// The fields are written in one pass through a pointer into space reserved up front
// (an upper bound, trimmed at the end), not by one append per piece: a limited
// request formats these on every response.
constexpr std::size_t int_chars = 20;  // an int64, sign included

char* put(char* p, std::string_view s) {
  std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

char* put_int(char* p, std::int64_t v) { return std::to_chars(p, p + int_chars, v).ptr; }

char* put_quoted(char* p, std::string_view name) {
  *p++ = '"';
  p = put(p, name);
  *p++ = '"';
  return p;
}

}  // namespace

void append_rate_headers(std::string& out, config::headers_mode mode,
                         std::span<const config::limit_config* const> limits, std::span<const decision> decisions,
                         bool denied) {
  const bool ietf = mode == config::headers_mode::ietf || mode == config::headers_mode::both;
  const bool legacy = mode == config::headers_mode::legacy || mode == config::headers_mode::both;
  const bool fields = mode != config::headers_mode::none && !limits.empty();
  std::size_t bound = 64;  // Retry-After
  if (fields && ietf) {
    bound += 64;
    for (const auto* l : limits) bound += 2 * (l->name.size() + 12 + 2 * int_chars);
  }
  if (fields && legacy) bound += 96 + 3 * int_chars;
  const std::size_t old = out.size();
  out.resize(old + bound);
  char* p = out.data() + old;

  if (denied) {
    std::int64_t retry = 0;
    for (std::size_t i = 0; i < limits.size(); ++i)
      if (!decisions[i].allowed && !limits[i]->shadow) retry = std::max(retry, decisions[i].retry_ms);
    p = put(p, "Retry-After: ");
    p = put_int(p, std::max<std::int64_t>(1, ceil_seconds(retry)));
    p = put(p, "\r\n");
  }
  if (fields && ietf) {
    p = put(p, "RateLimit-Policy: ");
    for (std::size_t i = 0; i < limits.size(); ++i) {
      if (i) p = put(p, ", ");
      p = put_quoted(p, limits[i]->name);
      p = put(p, ";q=");
      p = put_int(p, static_cast<std::int64_t>(decisions[i].limit));
      p = put(p, ";w=");
      p = put_int(p, window_seconds(*limits[i]));
    }
    p = put(p, "\r\nRateLimit: ");
    for (std::size_t i = 0; i < limits.size(); ++i) {
      const auto& d = decisions[i];
      if (i) p = put(p, ", ");
      p = put_quoted(p, limits[i]->name);
      p = put(p, ";r=");
      p = put_int(p, d.allowed ? static_cast<std::int64_t>(d.remaining) : 0);
      p = put(p, ";t=");
      p = put_int(p, d.allowed ? ceil_seconds(d.reset_ms) : ceil_seconds(d.retry_ms));
    }
    p = put(p, "\r\n");
  }
  if (fields && legacy) {
    // The most restrictive limit: the fewest remaining (a denying one first).
    std::size_t pick = 0;
    for (std::size_t i = 1; i < limits.size(); ++i) {
      auto ri = decisions[i].allowed ? decisions[i].remaining : 0;
      auto rp = decisions[pick].allowed ? decisions[pick].remaining : 0;
      if (ri < rp) pick = i;
    }
    const auto& d = decisions[pick];
    p = put(p, "X-RateLimit-Limit: ");
    p = put_int(p, static_cast<std::int64_t>(d.limit));
    p = put(p, "\r\nX-RateLimit-Remaining: ");
    p = put_int(p, d.allowed ? static_cast<std::int64_t>(d.remaining) : 0);
    p = put(p, "\r\nX-RateLimit-Reset: ");
    p = put_int(p, d.allowed ? ceil_seconds(d.reset_ms) : ceil_seconds(d.retry_ms));
    p = put(p, "\r\n");
  }
  out.resize(static_cast<std::size_t>(p - out.data()));
}

}  // namespace fg::limit
