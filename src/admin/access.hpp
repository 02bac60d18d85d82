#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "admin/routes.hpp"
#include "config/config.hpp"

namespace fg::admin {

// What the admin's access rules read of one request.
struct request_facts {
  std::string_view method;
  std::string_view path;
  std::optional<std::string_view> host;           // the Host field, if any
  std::optional<std::string_view> authorization;  // the Authorization field
  bool has_origin = false;                        // an Origin field: sent by browsers only
  bool has_admin_header = false;                  // X-Floodgate-Admin, non-empty
};

// The header a state-changing request carries on a loopback admin without a token: a
// web page cannot send it cross-origin without a CORS preflight, which the admin never
// grants, so a page the operator has open cannot reload the gateway.
inline constexpr std::string_view admin_header = "X-Floodgate-Admin";

// /config, /limits, /upstreams and POST /reload: what reveals or changes the gateway.
bool privileged(std::string_view path);

// Who may do what on the admin listener at `listen` with `cfg`:
//  - every path but the probes (/healthz, /readyz) needs a Host that is an IP literal,
//    "localhost", the listener's own name or one of admin.hosts (403 otherwise: a DNS
//    rebinding page sends its own name);
//  - a privileged path refuses requests from web pages (an Origin field, 403); with
//    admin.token it needs "Authorization: Bearer <token>" (401 with WWW-Authenticate,
//    compared in constant time); without one (loopback only, the loader sees to it) a
//    POST needs the admin_header (403).
// Nothing when the request may go on, or the answer that refuses it.
std::optional<reply> refuse(const request_facts& r, const config::admin_config& cfg);

// Whether `given` equals `token`, in time that depends on neither's content or length.
bool same_token(std::string_view given, std::string_view token);

}  // namespace fg::admin
