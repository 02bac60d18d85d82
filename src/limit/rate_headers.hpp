#pragma once
#include <span>
#include <string>

#include "config/config.hpp"
#include "limit/decision.hpp"

namespace fg::limit {

// Which limits the fields report: every evaluated one, or only those that denied (a
// denial repeated from the local deny cache knows nothing of the other limits).
enum class reported { every_limit, denying_limits };

// Rate-limit response fields for the limits that were evaluated (`checks[i]` gave
// `decisions[i]`), as raw "Name: value\r\n" lines, per `mode`:
//   ietf:   RateLimit-Policy: "per-ip";q=3;w=5   RateLimit: "per-ip";r=0;t=4
//           (a limit with plans: RateLimit-Policy: "per-key";q=1000;w=1;plan="gold")
//   legacy: X-RateLimit-Limit / -Remaining / -Reset of the most restrictive limit
// and, when `denied`, Retry-After in whole seconds, rounded up (at least 1).
void append_rate_headers(std::string& out, config::headers_mode mode, std::span<const check> checks,
                         std::span<const decision> decisions, bool denied,
                         reported which = reported::every_limit);

// Whole seconds, rounded up (config's: the policy item's window uses it too).
using config::ceil_seconds;

}  // namespace fg::limit
