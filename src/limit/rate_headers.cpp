#include "limit/rate_headers.hpp"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <string_view>

#include "util/text.hpp"

namespace fg::limit {

namespace {

// The fields are written in one pass through a pointer into space reserved up front
// (an upper bound, trimmed at the end), not by one append per piece: a limited
// request formats these on every response.
constexpr std::size_t int_chars = 20;  // an int64, sign included

using util::put;

char* put_int(char* p, std::int64_t v) { return std::to_chars(p, p + int_chars, v).ptr; }

char* put_quoted(char* p, std::string_view name) {
  *p++ = '"';
  p = put(p, name);
  *p++ = '"';
  return p;
}

}  // namespace

void append_rate_headers(std::string& out, config::headers_mode mode, std::span<const check> checks,
                         std::span<const decision> decisions, bool denied, reported which) {
  auto shown = [&](std::size_t i) { return which == reported::every_limit || !decisions[i].allowed; };
  const bool ietf = mode == config::headers_mode::ietf || mode == config::headers_mode::both;
  const bool legacy = mode == config::headers_mode::legacy || mode == config::headers_mode::both;
  std::size_t bound = 64;  // Retry-After
  std::size_t count = 0;
  for (std::size_t i = 0; i < checks.size(); ++i)
    // (the loader's policy item counted as it is: a copy of a loaded limit changed after
    // would carry an item that need not match its name and plan)
    if (shown(i))
      ++count, bound += 2 * (checks[i].cfg->name.size() + 12 + 2 * int_chars) + checks[i].cfg->plan.size() + 32 +
                        checks[i].cfg->rate_policy.size();
  const bool fields = mode != config::headers_mode::none && count > 0;
  if (fields && ietf) bound += 64;
  if (fields && legacy) bound += 96 + 3 * int_chars;
  const std::size_t old = out.size();
  out.resize(old + bound);
  char* p = out.data() + old;

  if (denied) {
    std::int64_t retry = 0;
    for (std::size_t i = 0; i < checks.size(); ++i)
      if (!decisions[i].allowed && !checks[i].cfg->shadow) retry = std::max(retry, decisions[i].retry_ms);
    p = put(p, "Retry-After: ");
    p = put_int(p, std::max<std::int64_t>(1, ceil_seconds(retry)));
    p = put(p, "\r\n");
  }
  if (fields && ietf) {
    p = put(p, "RateLimit-Policy: ");
    std::string_view sep = "";
    for (std::size_t i = 0; i < checks.size(); ++i) {
      if (!shown(i)) continue;
      p = put(p, sep);
      sep = ", ";
      // The loader's copy, formatted once (~250 instructions a response, callgrind);
      // formatted here for a limit made by hand or a quota other than its own.
      const auto& l = *checks[i].cfg;
      if (!l.rate_policy.empty() && decisions[i].limit == config::quota(l)) p = put(p, l.rate_policy);
      else p = put(p, config::rate_policy_item(l, decisions[i].limit));
    }
    p = put(p, "\r\nRateLimit: ");
    sep = "";
    for (std::size_t i = 0; i < checks.size(); ++i) {
      if (!shown(i)) continue;
      const auto& d = decisions[i];
      p = put(p, sep);
      sep = ", ";
      p = put_quoted(p, checks[i].cfg->name);
      p = put(p, ";r=");
      p = put_int(p, d.allowed ? static_cast<std::int64_t>(d.remaining) : 0);
      p = put(p, ";t=");
      p = put_int(p, d.allowed ? ceil_seconds(d.reset_ms) : ceil_seconds(d.retry_ms));
    }
    p = put(p, "\r\n");
  }
  if (fields && legacy) {
    // The most restrictive limit shown: the fewest remaining (a denying one first).
    std::size_t pick = checks.size();
    auto left = [&](std::size_t i) { return decisions[i].allowed ? decisions[i].remaining : 0; };
    for (std::size_t i = 0; i < checks.size(); ++i)
      if (shown(i) && (pick == checks.size() || left(i) < left(pick))) pick = i;
    const auto& d = decisions[pick];
    p = put(p, "X-RateLimit-Limit: ");
    p = put_int(p, static_cast<std::int64_t>(d.limit));
    p = put(p, "\r\nX-RateLimit-Remaining: ");
    p = put_int(p, static_cast<std::int64_t>(left(pick)));
    p = put(p, "\r\nX-RateLimit-Reset: ");
    p = put_int(p, d.allowed ? ceil_seconds(d.reset_ms) : ceil_seconds(d.retry_ms));
    p = put(p, "\r\n");
  }
  assert(p <= out.data() + old + bound);
  out.resize(static_cast<std::size_t>(p - out.data()));
}

}  // namespace fg::limit
