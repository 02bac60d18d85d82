#pragma once
#include <span>
#include <string>

#include "config/config.hpp"
#include "limit/decision.hpp"

namespace fg::limit {

// Rate-limit response fields for the limits that were evaluated (`limits[i]` gave
// `decisions[i]`), as raw "Name: value\r\n" lines, per `mode`:
//   ietf:   RateLimit-Policy: "per-ip";q=3;w=5   RateLimit: "per-ip";r=0;t=4
//   legacy: X-RateLimit-Limit / -Remaining / -Reset of the most restrictive limit
// and, when `denied`, Retry-After in whole seconds, rounded up (at least 1).
void append_rate_headers(std::string& out, config::headers_mode mode,
                         std::span<const config::limit_config* const> limits, std::span<const decision> decisions,
                         bool denied);

// Whole seconds, rounded up.
std::int64_t ceil_seconds(std::int64_t ms);

}  // namespace fg::limit
