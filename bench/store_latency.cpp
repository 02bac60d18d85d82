// The memory store's latency per decision with a large store, filled directly (no
// HTTP): what a limited request waits for the store, sweeps of expired keys included.
//
//   floodgate-store-bench KEYS [SECONDS]
//
// A store capped at KEYS (memory.max_keys) is filled with KEYS keys, half with a 60 s
// fixed window, half with windows of 1-10 s, so that keys keep expiring while it is
// measured. Then, for SECONDS (default 5) on the store's clock (real milliseconds), one
// thread decides: 90% a known key (drawn at random), 10% a new client, each answer
// timed. Prints one line: calls, p50, p99, p99.9 and the largest, in microseconds, and
// the store's size at the end. bench/store_latency.py builds and runs it against two
// builds.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "config/config.hpp"
#include "limit/decision.hpp"
#include "store/memory_store.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

fg::config::limit_config window_of(std::int64_t ms) {
  fg::config::limit_config c;
  c.name = "bench";
  c.algo = fg::config::algorithm::fixed_window;
  c.limit = 100;
  c.window = std::chrono::milliseconds(ms);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s KEYS [SECONDS]\n", argv[0]);
    return 2;
  }
  // (the store's eviction warnings are expected here: the store is full on purpose)
  spdlog::set_level(spdlog::level::err);
  const std::size_t keys = std::stoull(argv[1]);
  const double seconds = argc > 2 ? std::stod(argv[2]) : 5.0;
  fg::store::memory_store st(keys);
  std::vector<fg::config::limit_config> windows;
  windows.push_back(window_of(60'000));
  for (int s = 1; s <= 10; ++s) windows.push_back(window_of(s * 1000));
  std::mt19937_64 rng(42);
  const auto start = clock_type::now();
  auto now_ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - start).count() + 1'000'000;
  };
  auto decide = [&](const std::string& key, std::size_t which) {
    fg::limit::check c{&windows[which], key, 1};
    fg::limit::decision d;
    st.evaluate(std::span<const fg::limit::check>(&c, 1), std::span<fg::limit::decision>(&d, 1), now_ms(), 0);
  };
  std::string key;
  for (std::size_t i = 0; i < keys; ++i) {
    key = "client:" + std::to_string(i);
    decide(key, i % 2 == 0 ? 0 : 1 + (i / 2) % 10);
  }
  const auto filled = std::chrono::duration<double>(clock_type::now() - start).count();
  std::vector<std::uint32_t> ns;
  ns.reserve(static_cast<std::size_t>(seconds * 3'000'000));
  std::size_t fresh = keys;
  const auto until = clock_type::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    const auto r = rng();
    if (r % 10 == 0) key = "client:" + std::to_string(fresh++);
    else key = "client:" + std::to_string(r % keys);
    const std::size_t which = (r >> 8) % 2 == 0 ? 0 : 1 + (r >> 16) % 10;
    const auto t = clock_type::now();
    decide(key, which);
    const auto took = clock_type::now() - t;
    ns.push_back(static_cast<std::uint32_t>(std::min<std::int64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(took).count(), UINT32_MAX)));
    if (t >= until) break;
  }
  std::sort(ns.begin(), ns.end());
  auto at = [&](double q) { return ns[std::min(ns.size() - 1, static_cast<std::size_t>(q * ns.size()))] / 1000.0; };
  std::printf("keys %zu (filled in %.1f s): %zu calls, p50 %.2f us, p99 %.2f us, p99.9 %.2f us, max %.1f us; %zu keys "
              "at the end\n",
              keys, filled, ns.size(), at(0.5), at(0.99), at(0.999), ns.back() / 1000.0, st.size());
  return 0;
}
