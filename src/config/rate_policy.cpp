#include <algorithm>
#include <string>

#include "config/config.hpp"

namespace fg::config {

std::int64_t ceil_seconds(std::int64_t ms) { return ms <= 0 ? 0 : (ms + 999) / 1000; }

namespace {

// The policy window in seconds: the limit's window, or the time its burst takes to refill.
std::int64_t window_seconds(const limit_config& l) {
  return ceil_seconds(rate_based(l) ? l.rate_.per.count() * static_cast<std::int64_t>(l.burst) /
                                          static_cast<std::int64_t>(std::max<std::uint64_t>(1, l.rate_.count))
                                    : l.window.count());
}

}  // namespace

std::string rate_policy_item(const limit_config& l, std::uint64_t q) {
  std::string out;
  out.reserve(l.name.size() + l.plan.size() + 80);
  out += '"';
  out += l.name;
  out += "\";q=";
  out += std::to_string(q);
  out += ";w=";
  out += std::to_string(window_seconds(l));
  // The quota's unit where it is not requests: an upload quota counts bytes.
  if (l.cost_from == limit_config::cost_kind::body_bytes) out += ";qu=\"content-bytes\"";
  // The plan in force, an extension parameter (the draft lets a client ignore it).
  if (!l.plan.empty()) {
    out += ";plan=\"";
    out += l.plan;
    out += '"';
  }
  return out;
}

}  // namespace fg::config
