#pragma once
// The limits the limit tests configure: a count per window, or a rate with a burst.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "limit/keys.hpp"

namespace fg::test {

inline config::limit_config windowed(config::algorithm algo, std::uint64_t limit, std::int64_t window_ms,
                                     std::string name = "l") {
  config::limit_config c;
  c.name = std::move(name);
  c.algo = algo;
  c.limit = limit;
  c.window = std::chrono::milliseconds(window_ms);
  return c;
}

inline config::limit_config rated(config::algorithm algo, std::uint64_t count, std::int64_t per_ms,
                                  std::uint64_t burst, std::string name = "r") {
  config::limit_config c;
  c.name = std::move(name);
  c.algo = algo;
  c.rate_ = {count, std::chrono::milliseconds(per_ms)};
  c.burst = burst;
  return c;
}

// A request's parts for key building, its headers from a map (exact names).
using header_map = std::map<std::string, std::string, std::less<>>;
inline std::optional<std::string_view> lookup(const void* ctx, std::string_view name) {
  const auto& m = *static_cast<const header_map*>(ctx);
  auto it = m.find(name);
  if (it == m.end()) return std::nullopt;
  return std::string_view(it->second);
}
inline limit::request_parts parts(const header_map& h, std::string_view client = "1.2.3.4",
                                  std::string_view query = "") {
  limit::request_parts r;
  r.client = client;
  r.query = query;
  r.header = &lookup;
  r.header_ctx = &h;
  return r;
}

}  // namespace fg::test
