#include "limit/denial.hpp"

#include <algorithm>

#include "limit/rate_headers.hpp"

namespace fg::limit {

namespace {

constexpr std::string_view quota_exceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded";
constexpr std::string_view reduced_capacity =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

// What the body reports. Names (routes, limits, plans) are letters, digits and - _ .
// (the loader's rule), so they go into JSON and text as they are.
struct facts {
  std::string_view route, limit, plan;
  std::int64_t retry_after = 1;
  unsigned status = 429;
};

void fill_template(std::string& out, std::string_view tmpl, const facts& f) {
  for (std::size_t i = 0; i < tmpl.size();) {
    auto open = tmpl.find('{', i);
    if (open == std::string_view::npos) {
      out.append(tmpl.substr(i));
      break;
    }
    out.append(tmpl.substr(i, open - i));
    auto close = tmpl.find('}', open);
    auto name = close == std::string_view::npos ? std::string_view{} : tmpl.substr(open + 1, close - open - 1);
    if (name == "limit") out.append(f.limit);
    else if (name == "plan") out.append(f.plan);
    else if (name == "route") out.append(f.route);
    else if (name == "retry_after") out.append(std::to_string(f.retry_after));
    else if (name == "status") out.append(std::to_string(f.status));
    else {
      out.push_back('{');  // not a field: kept as written
      i = open + 1;
      continue;
    }
    i = close + 1;
  }
}

void problem(std::string& out, std::string_view type, std::string_view title, const facts& f,
             std::span<const std::string_view> violated) {
  out.append(R"({"type":")").append(type).append(R"(","title":")").append(title);
  out.append(R"(","status":)").append(std::to_string(f.status));
  if (!violated.empty()) {
    out.append(R"(,"detail":"limit )").append(f.limit).append(" of route ").append(f.route);
    out.append(": retry in ").append(std::to_string(f.retry_after)).append(R"( s","violated-policies":[)");
    for (std::size_t i = 0; i < violated.size(); ++i)
      out.append(i ? ",\"" : "\"").append(violated[i]).append("\"");
    out.append(R"(],"limit":")").append(f.limit).append("\"");
    if (!f.plan.empty()) out.append(R"(,"plan":")").append(f.plan).append("\"");
  } else {
    out.append(R"(,"detail":"the rate-limit store cannot be reached: route )").append(f.route).append(" refuses");
    out.append("\"");
  }
  out.append(R"(,"retry_after":)").append(std::to_string(f.retry_after)).append("}");
}

}  // namespace

void append_refusal_body(std::string& out, const config::route_config& route, unsigned status) {
  const char* title = status == 401 ? "Unauthorized" : status == 403 ? "Forbidden" : "Bad Request";
  const char* detail = status == 401   ? "this route needs a consumer key"
                       : status == 403 ? "the consumer key is not known"
                                       : "a cost header must be a whole number from 0 to 1000000000";
  out.append(R"({"type":"about:blank","title":")").append(title);
  out.append(R"(","status":)").append(std::to_string(status)).append(R"(,"detail":")").append(detail);
  out.append(" (route ").append(route.name).append(")\"}");
}

std::string_view content_type(const config::response_config& r) {
  if (!r.content_type.empty()) return r.content_type;
  switch (r.format) {
    case config::body_format::problem: return "application/problem+json";
    case config::body_format::text: return "text/plain; charset=utf-8";
    case config::body_format::custom: break;
  }
  return "application/json";
}

void append_denial_body(std::string& out, const config::route_config& route, std::span<const check> checks,
                        std::span<const decision> decisions) {
  facts f{route.name, {}, {}, 0, route.response.status};
  // The limit whose retry is furthest is the one reported; every denying one is listed.
  std::string_view violated[32];
  std::size_t n = 0;
  for (std::size_t i = 0; i < checks.size() && i < decisions.size(); ++i) {
    if (decisions[i].allowed || checks[i].cfg->shadow) continue;
    if (n < std::size(violated)) violated[n++] = checks[i].cfg->name;
    if (f.limit.empty() || decisions[i].retry_ms > f.retry_after) {
      f.limit = checks[i].cfg->name;
      f.plan = checks[i].cfg->plan;
      f.retry_after = decisions[i].retry_ms;
    }
  }
  f.retry_after = std::max<std::int64_t>(1, ceil_seconds(f.retry_after));
  switch (route.response.format) {
    case config::body_format::problem:
      problem(out, quota_exceeded, "Request cannot be satisfied as assigned quota has been exceeded", f,
              std::span(violated, n));
      break;
    case config::body_format::text:
      out.append("Too Many Requests: limit ").append(f.limit).append(" of route ").append(f.route);
      out.append(", retry in ").append(std::to_string(f.retry_after)).append(" s\n");
      break;
    case config::body_format::custom:
      fill_template(out, route.response.body, f);
      break;
  }
}

void append_unavailable_body(std::string& out, const config::route_config& route) {
  facts f{route.name, {}, {}, 1, 503};
  switch (route.response.format) {
    case config::body_format::problem:
      problem(out, reduced_capacity, "Service Unavailable", f, {});
      break;
    case config::body_format::text:
      out.append("Service Unavailable: the rate-limit store cannot be reached, retry in 1 s\n");
      break;
    case config::body_format::custom:
      fill_template(out, route.response.body, f);
      break;
  }
}

}  // namespace fg::limit
