#pragma once
// What gRPC makes of the gateway's own answers (a request whose content-type is
// application/grpc*): HTTP 200 with a grpc-status and a grpc-message, as Envoy maps
// HTTP statuses to gRPC ones. Pure.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
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

// The HTTP status a call's grpc-status stands for, for passive health (eject.statuses),
// as Envoy's outlier detection maps it: 14 UNAVAILABLE a 503, 4 DEADLINE_EXCEEDED a
// 504, 13 INTERNAL, 2 UNKNOWN and 15 DATA_LOSS a 500, ...; 0 OK a 200.
inline unsigned http_status_of_grpc(int code) {
  switch (code) {
    case 0: return 200;
    case 1: return 499;
    case 3: case 9: case 11: return 400;
    case 4: return 504;
    case 5: return 404;
    case 6: case 10: return 409;
    case 7: return 403;
    case 8: return 429;
    case 12: return 501;
    case 14: return 503;
    case 16: return 401;
    default: return 500;  // 2 UNKNOWN, 13 INTERNAL, 15 DATA_LOSS, any other
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

// A call's grpc-timeout ("TimeoutValue TimeoutUnit": at most 8 digits, then H, M, S, m,
// u or n), rounded up to whole milliseconds, at most a year; nullopt when it is not one.
inline std::optional<std::chrono::milliseconds> grpc_timeout(std::string_view v) {
  if (v.size() < 2 || v.size() > 9) return std::nullopt;
  std::uint64_t n = 0;
  for (char c : v.substr(0, v.size() - 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  std::uint64_t ns_per = 0;
  switch (v.back()) {
    case 'H': ns_per = 3'600'000'000'000; break;
    case 'M': ns_per = 60'000'000'000; break;
    case 'S': ns_per = 1'000'000'000; break;
    case 'm': ns_per = 1'000'000; break;
    case 'u': ns_per = 1'000; break;
    case 'n': ns_per = 1; break;
    default: return std::nullopt;
  }
  // At most a year: 99,999,999 hours fits in 64 bits of milliseconds, not in a steady
  // clock's nanoseconds (and a Go client's "no deadline" is 2562047H).
  constexpr std::uint64_t year_ms = 365ull * 24 * 3'600'000;
  const std::uint64_t ms = ns_per >= 1'000'000 ? n * (ns_per / 1'000'000) : (n * ns_per + 999'999) / 1'000'000;
  return std::chrono::milliseconds(std::min(ms, year_ms));
}

}  // namespace fg::http
