#include "admin/upstreams_view.hpp"

#include <boost/json/array.hpp>

#include "admin/config_json.hpp"

namespace fg::admin {

namespace json = boost::json;

namespace {

json::object server_json(const upstream::server& s, const config::health_check_config& health,
                         std::chrono::steady_clock::time_point now) {
  const auto& h = *s.health;
  const auto read = [](const auto& a) { return a.load(std::memory_order_relaxed); };
  const bool out = h.ejected(now);
  const auto left_ns = read(h.ejected_until) - now.time_since_epoch().count();
  const auto last = read(h.last_failure);
  json::object o{{"address", s.address},
                 {"name", s.cfg.name.empty() ? json::value(nullptr) : json::value(s.cfg.name)},
                 {"weight", s.cfg.weight},
                 {"state", out ? "ejected" : read(h.check_failing) ? "failing_checks" : "up"},
                 {"ejected_for_ms", out ? left_ns / 1'000'000 : 0},
                 {"failures_in_row", read(h.failures_in_row)},
                 {"active", read(h.active)},
                 {"requests", read(h.requests)},
                 {"failures", read(h.failures)},
                 {"ejections", read(h.ejections)},
                 {"retries", read(h.retries)},
                 {"last_failure", nullptr},
                 {"last_status", read(h.last_status)}};
  if (last != upstream::failure_kind::none) o["last_failure"] = upstream::describe(last);
  if (health.enabled) {
    const auto check_last = read(h.check_last);
    o["checks"] = json::object{{"passing", !read(h.check_failing)},
                               {"total", read(h.checks)},
                               {"failures", read(h.check_failures)},
                               {"last_failure", check_last == upstream::failure_kind::none
                                                    ? json::value(nullptr)
                                                    : json::value(upstream::describe(check_last))},
                               {"last_status", read(h.check_status)}};
  }
  return o;
}

}  // namespace

json::object upstreams_to_json(const upstream::server_set& set, std::chrono::steady_clock::time_point now) {
  json::array ups;
  for (const auto& u : set.all()) {
    json::array servers;
    for (const auto& s : u.servers) servers.emplace_back(server_json(s, u.health, now));
    ups.emplace_back(json::object{{"name", u.name},
                                  {"protocol", u.h2 ? "h2" : "http1"},
                                  {"balance", balance_name(u.balance)},
                                  {"servers", std::move(servers)}});
  }
  return {{"upstreams", std::move(ups)}};
}

}  // namespace fg::admin
