#pragma once
// What gRPC makes of the gateway's own answers (a request whose content-type is
// application/grpc*): HTTP 200 with a grpc-status and a grpc-message, as Envoy maps
// HTTP statuses to gRPC ones. Pure.
#include <string_view>

namespace fg::http {

// The gRPC status a local answer of `status` stands for (a limit's denial is the
// route's response.grpc_status instead, 8 RESOURCE_EXHAUSTED by default; a store
// failure under `deny`, a 503, is 14 UNAVAILABLE).
inline unsigned grpc_status_of(unsigned status) {
  switch (status) {
    case 400: return 13;  // INTERNAL
    case 401: return 16;  // UNAUTHENTICATED
    case 403: return 7;   // PERMISSION_DENIED
    case 404: return 12;  // UNIMPLEMENTED
    case 429: return 8;   // RESOURCE_EXHAUSTED
    case 502: case 503: case 504: return 14;  // UNAVAILABLE
    default: return 2;    // UNKNOWN
  }
}

// The grpc-message of a local answer (plain ASCII: nothing to percent-encode).
inline std::string_view grpc_message_of(unsigned status) {
  switch (status) {
    case 400: return "bad request";
    case 401: return "unauthenticated";
    case 403: return "forbidden";
    case 404: return "no route";
    case 408: return "request timeout";
    case 413: return "request too large";
    case 429: return "rate limited";
    case 502: return "upstream failed";
    case 503: return "unavailable";
    case 504: return "upstream timed out";
    default: return "refused by the gateway";
  }
}

// A request's TE names `trailers` (RFC 9110 §10.1.4: a list of codings with weights).
inline bool te_trailers(std::string_view te) {
  while (!te.empty()) {
    auto comma = te.find(',');
    auto item = te.substr(0, comma);
    item = item.substr(0, item.find(';'));
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (item.size() == 8) {
      bool eq = true;
      for (std::size_t i = 0; i < 8; ++i) eq = eq && ((item[i] | 0x20) == "trailers"[i]);
      if (eq) return true;
    }
    if (comma == std::string_view::npos) break;
    te.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace fg::http
