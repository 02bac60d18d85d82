#include "limit/headers.hpp"

#include <algorithm>

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

void append_rate_headers(std::string& out, config::headers_mode mode,
                         std::span<const config::limit_config* const> limits, std::span<const decision> decisions,
                         bool denied) {
  if (denied) {
    std::int64_t retry = 0;
    for (std::size_t i = 0; i < limits.size(); ++i)
      if (!decisions[i].allowed && !limits[i]->shadow) retry = std::max(retry, decisions[i].retry_ms);
    out.append("Retry-After: ").append(std::to_string(std::max<std::int64_t>(1, ceil_seconds(retry)))).append("\r\n");
  }
  if (mode == config::headers_mode::none || limits.empty()) return;
  if (mode == config::headers_mode::ietf || mode == config::headers_mode::both) {
    std::string policy, state;
    for (std::size_t i = 0; i < limits.size(); ++i) {
      const auto& l = *limits[i];
      const auto& d = decisions[i];
      if (i) policy += ", ", state += ", ";
      policy += "\"" + l.name + "\";q=" + std::to_string(d.limit) + ";w=" + std::to_string(window_seconds(l));
      auto remaining = d.allowed ? d.remaining : 0;
      auto t = d.allowed ? ceil_seconds(d.reset_ms) : ceil_seconds(d.retry_ms);
      state += "\"" + l.name + "\";r=" + std::to_string(remaining) + ";t=" + std::to_string(t);
    }
    out.append("RateLimit-Policy: ").append(policy).append("\r\n");
    out.append("RateLimit: ").append(state).append("\r\n");
  }
  if (mode == config::headers_mode::legacy || mode == config::headers_mode::both) {
    // The most restrictive limit: the fewest remaining (a denying one first).
    std::size_t pick = 0;
    for (std::size_t i = 1; i < limits.size(); ++i) {
      auto ri = decisions[i].allowed ? decisions[i].remaining : 0;
      auto rp = decisions[pick].allowed ? decisions[pick].remaining : 0;
      if (ri < rp) pick = i;
    }
    const auto& d = decisions[pick];
    auto remaining = d.allowed ? d.remaining : 0;
    auto reset = d.allowed ? ceil_seconds(d.reset_ms) : ceil_seconds(d.retry_ms);
    out.append("X-RateLimit-Limit: ").append(std::to_string(d.limit)).append("\r\n");
    out.append("X-RateLimit-Remaining: ").append(std::to_string(remaining)).append("\r\n");
    out.append("X-RateLimit-Reset: ").append(std::to_string(reset)).append("\r\n");
  }
}

}  // namespace fg::limit
