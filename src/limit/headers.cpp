#include "limit/headers.hpp"

#include <algorithm>
#include <charconv>

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

void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<std::size_t>(r.ptr - buf));
}

void append_quoted(std::string& out, const std::string& name) {
  out += '"';
  out += name;
  out += '"';
}

}  // namespace

void append_rate_headers(std::string& out, config::headers_mode mode,
                         std::span<const config::limit_config* const> limits, std::span<const decision> decisions,
                         bool denied) {
  if (denied) {
    std::int64_t retry = 0;
    for (std::size_t i = 0; i < limits.size(); ++i)
      if (!decisions[i].allowed && !limits[i]->shadow) retry = std::max(retry, decisions[i].retry_ms);
    out += "Retry-After: ";
    append_int(out, std::max<std::int64_t>(1, ceil_seconds(retry)));
    out += "\r\n";
  }
  if (mode == config::headers_mode::none || limits.empty()) return;
  if (mode == config::headers_mode::ietf || mode == config::headers_mode::both) {
    out += "RateLimit-Policy: ";
    for (std::size_t i = 0; i < limits.size(); ++i) {
      if (i) out += ", ";
      append_quoted(out, limits[i]->name);
      out += ";q=";
      append_int(out, static_cast<std::int64_t>(decisions[i].limit));
      out += ";w=";
      append_int(out, window_seconds(*limits[i]));
    }
    out += "\r\nRateLimit: ";
    for (std::size_t i = 0; i < limits.size(); ++i) {
      const auto& d = decisions[i];
      if (i) out += ", ";
      append_quoted(out, limits[i]->name);
      out += ";r=";
      append_int(out, d.allowed ? static_cast<std::int64_t>(d.remaining) : 0);
      out += ";t=";
      append_int(out, d.allowed ? ceil_seconds(d.reset_ms) : ceil_seconds(d.retry_ms));
    }
    out += "\r\n";
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
    out += "X-RateLimit-Limit: ";
    append_int(out, static_cast<std::int64_t>(d.limit));
    out += "\r\nX-RateLimit-Remaining: ";
    append_int(out, d.allowed ? static_cast<std::int64_t>(d.remaining) : 0);
    out += "\r\nX-RateLimit-Reset: ";
    append_int(out, d.allowed ? ceil_seconds(d.reset_ms) : ceil_seconds(d.retry_ms));
    out += "\r\n";
  }
}

}  // namespace fg::limit
