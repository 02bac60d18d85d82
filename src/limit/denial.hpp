#pragma once
// What a denied client is told in the body: RFC 9457 problem details by default, with the
// IETF rate-limit draft's problem types (quota-exceeded for a limit's denial,
// temporary-reduced-capacity for a store outage answered 503), the limits it broke, the
// seconds until a retry can succeed and the plan in force; or a line of text; or the
// route's own body, a template of the same fields.
#include <span>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "limit/decision.hpp"

namespace fg::limit {

// The body of a denial by `decisions` (`checks[i]` gave `decisions[i]`) on `route`;
// its Content-Type is content_type(route.response).
void append_denial_body(std::string& out, const config::route_config& route, std::span<const check> checks,
                        std::span<const decision> decisions);
// The body of a 503 when the store failed and the route's on_store_error is deny.
void append_unavailable_body(std::string& out, const config::route_config& route);
// The body of a request its limits' inputs refuse: 401 (no consumer key or plan name) or
// 403 (one no plan knows) of plans that refuse the unknown, 400 (a cost header that is
// no number); always problem details.
void append_refusal_body(std::string& out, const config::route_config& route, unsigned status);
std::string_view content_type(const config::response_config& r);

}  // namespace fg::limit
