#pragma once
// What the admin unit tests share: a configuration from YAML text, a status source
// whose answers a test sets, and admin::serve() run to completion.
#include <catch2/catch.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "admin/routes.hpp"
#include "config/loader.hpp"

namespace fg::test {

inline config::snapshot load(const std::string& text) {
  auto r = config::load_string(text, "test.yaml");
  for (const auto& e : r.errors) FAIL(e.str());
  return r.cfg;
}

struct fake_status final : admin::status_source {
  explicit fake_status(config::snapshot c = {}) : cfg(std::move(c)) {}
  config::snapshot cfg;
  admin::readiness state{true, {}, {}};
  admin::reload_outcome next_reload{true, "abc", {}, {}};
  int reloads = 0;
  config::snapshot current_config() const override { return cfg; }
  admin::readiness ready() const override { return state; }
  std::string metrics() const override { return "# TYPE x counter\nx 1\n"; }
  std::shared_ptr<const upstream::server_set> upstream_servers() const override {
    return cfg ? upstream::server_set::build(cfg->upstreams, nullptr) : nullptr;
  }
  void reload(std::function<void(admin::reload_outcome)> done) override {
    ++reloads;
    done(next_reload);
  }
};

// A reply's status, type and body, as one check each.
inline void expect_reply(const admin::reply& r, unsigned status, std::string_view type, std::string_view body) {
  CHECK(r.status == status);
  CHECK(r.content_type == type);
  CHECK(r.body == body);
}

// admin::serve(), run to completion on an io_context of its own.
inline admin::reply serve(const char* method, const std::string& target, fake_status& s, admin::services with = {}) {
  boost::asio::io_context ioc;
  admin::reply out;
  boost::asio::co_spawn(
      ioc, [&]() -> boost::asio::awaitable<void> { out = co_await admin::serve(method, target, s, with); },
      boost::asio::detached);
  ioc.run();
  return out;
}

}  // namespace fg::test
