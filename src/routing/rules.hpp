#pragma once
#include <string>
#include <string_view>
#include <vector>

// The rules by which a request is matched to a route: pure, and below config so that
// the config loader (which rejects routes the router would never see, or would shadow)
// and the router apply one rule.
namespace fg::routing {

// Whether a route's method set (empty: any) takes `method`. A set with GET takes HEAD
// too: servlet containers and Spring serve HEAD with the GET handler (nginx's
// limit_except GET does the same), so a HEAD flood must not slip past a GET route's
// limits to a catch-all.
bool methods_take(const std::vector<std::string>& methods, std::string_view method);

// Whether an exact route path takes the (normalized) request path `path`: itself, or
// itself with one trailing slash, which Spring MVC 5 (Spring Boot 2) serves with the
// same handler ("/login/" must not slip past the route and limits of "/login").
bool exact_path_takes(std::string_view route_path, std::string_view path);

// Host header without port, lower-cased, trailing dot removed ("API.Example.com.:8080" -> "api.example.com").
std::string normalize_host(std::string_view host);

// Path from a request target for matching: query dropped, dot segments removed,
// percent-encoded unreserved characters decoded, repeated slashes merged.
// Returns false when the target is not a valid origin-form (or absolute-form) target.
bool normalize_target_path(std::string_view target, std::string& path_out);

}  // namespace fg::routing
