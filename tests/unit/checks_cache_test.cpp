// limit::checks_cache: a connection's last checks serve its next request only on the
// same route, from the same client, under the same configuration (held, so that its
// routes' addresses stay its own); not when they were not reusable, nor once forgotten.
#include <catch2/catch.hpp>

#include <memory>

#include "limit/checks_cache.hpp"

TEST_CASE("checks_cache: serves the same route, client and configuration only", "[checks_cache]") {
  auto a = std::make_shared<const fg::config::config>();
  auto b = std::make_shared<const fg::config::config>();
  fg::config::route_config r1, r2;
  fg::limit::checks_cache cache;
  CHECK_FALSE(cache.serves(r1, a.get(), "192.0.2.7"));
  cache.keep(true, r1, a, "192.0.2.7");
  CHECK(cache.serves(r1, a.get(), "192.0.2.7"));
  CHECK_FALSE(cache.serves(r2, a.get(), "192.0.2.7"));  // another route
  CHECK_FALSE(cache.serves(r1, b.get(), "192.0.2.7"));  // another configuration
  CHECK_FALSE(cache.serves(r1, a.get(), "192.0.2.8"));  // another client
  // The configuration is held: its address cannot be another's while kept.
  const auto* was = a.get();
  a.reset();
  CHECK(cache.serves(r1, was, "192.0.2.7"));
  cache.forget();
  CHECK_FALSE(cache.serves(r1, was, "192.0.2.7"));
}

TEST_CASE("checks_cache: checks that are not reusable are not kept, and an idle connection holds nothing",
          "[checks_cache]") {
  auto a = std::make_shared<const fg::config::config>();
  fg::config::route_config r;
  fg::limit::checks_cache cache;
  cache.keep(false, r, a, "192.0.2.7");
  CHECK_FALSE(cache.serves(r, a.get(), "192.0.2.7"));
  cache.keep(true, r, a, "192.0.2.7");
  CHECK(a.use_count() == 2);
  cache.release_memory();
  CHECK(a.use_count() == 1);
  CHECK_FALSE(cache.serves(r, a.get(), "192.0.2.7"));
}
