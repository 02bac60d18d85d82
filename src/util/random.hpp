#pragma once
// A fast random 64-bit value per call (splitmix64, one state per thread seeded from the
// OS once): for ids that must not collide (X-Request-Id, trace and span ids), never for
// secrets.
#include <cstdint>
#include <random>

namespace fg::util {

inline std::uint64_t unique_random() {
  thread_local std::uint64_t state =
      (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace fg::util
