#pragma once
#include <cstddef>
#include <cstdint>

// What one configuration file may hold. Each is far above what a real gateway needs and
// low enough that loading, checking and serving a file at the cap stays fast and small;
// each is checked before the work it bounds, with an error naming it.
namespace fg::config::caps {

inline constexpr std::uint64_t file_bytes = 4 * 1024 * 1024;  // the file's text
// YAML nodes visited with aliases expanded (`*a` counts its whole subtree each time).
inline constexpr std::size_t nodes = 1'000'000;
inline constexpr std::size_t depth = 64;      // nesting of mappings and lists
inline constexpr std::size_t routes = 10'000;
inline constexpr std::size_t limits_per_route = 64;  // one script call's answer unpacked on Lua's stack
inline constexpr std::size_t limits = 20'000;        // all routes together
inline constexpr std::size_t upstreams = 1'000;
inline constexpr std::size_t servers = 256;         // per upstream (each request may weigh them all)
inline constexpr std::size_t servers_total = 10'000;  // all upstreams together (a metrics series each)
// Addresses taken from one server name's answer (the lowest, sorted); the upstream's
// servers, once its names are expanded, are still at most `servers`.
inline constexpr std::size_t addresses_per_name = 64;
inline constexpr std::size_t list_items = 10'000;    // any other list (trusted_proxies, methods, ...)
inline constexpr std::size_t errors = 100;           // reported; then one line says there are more

}  // namespace fg::config::caps
