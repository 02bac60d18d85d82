#include "config/loader_parts.hpp"

#include <algorithm>
#include <set>

#include "config/caps.hpp"
#include "config/duration.hpp"
#include "routing/rules.hpp"
#include "util/text.hpp"

namespace fg::config::detail {

void route_loader::routes(const YAML::Node& node, config& c) {
  drain_timeout_ = c.http.drain_timeout;
  if (!node.IsSequence()) {
    r_.error(node, "routes must be a list");
    return;
  }
  if (node.size() == 0) r_.error(node, "routes must not be empty");
  if (!r_.within(node, caps::routes, "a configuration", "routes")) return;
  std::set<std::string> names;
  std::size_t index = 0;
  for (const auto& rn : node) {
    route_config rc;
    ++index;
    // yaml-cpp marks an empty item at the token after it, so point at the list instead.
    if (!present(rn)) r_.error(node, "route #" + std::to_string(index) + " is empty (a route must be a mapping)");
    yaml_reader::object o(r_, rn, "a route");
    if (!o.ok()) continue;
    auto name = o.get("name");
    if (present(name)) {
      set(rc.name, r_.string(name));
      if (!util::is_name(rc.name)) r_.error(name, "invalid route name '" + rc.name + "' (letters, digits, - _ .)");
      else if (!names.insert(rc.name).second) r_.error(name, "duplicate route name '" + rc.name + "'");
    } else {
      r_.error(rn, "route needs a name");
    }
    auto m = o.get("match");
    if (present(m)) {
      match(m, rc.match);
      if (auto by = shadowed_by_slash(c, rc.match))
        r_.error(m["path"], "route '" + rc.name + "' can never match: route '" + *by + "' before it takes " +
                                rc.match.path + " too (an exact path also takes one trailing slash); list '" +
                                rc.name + "' first");
    } else {
      r_.error(rn, "route '" + rc.name + "' needs a match");
    }
    auto up = o.get("upstream");
    if (present(up)) {
      auto name_s = r_.string(up);
      set(rc.upstream, name_s);
      auto found = std::find_if(c.upstreams.begin(), c.upstreams.end(), [&](auto& u) { return u.name == rc.upstream; });
      if (!name_s) {
        // already reported
      } else if (found == c.upstreams.end()) {
        std::vector<std::string> all;
        for (const auto& u : c.upstreams) all.push_back(u.name);
        std::string msg = "unknown upstream '" + rc.upstream + "'";
        if (auto hint = did_you_mean(rc.upstream, all)) msg += " (did you mean '" + *hint + "'?)";
        r_.error(up, msg);
      } else {
        rc.upstream_index = static_cast<std::size_t>(found - c.upstreams.begin());
      }
    } else {
      r_.error(rn, "route '" + rc.name + "' needs an upstream");
    }
    if (auto n = o.get("on_store_error"); present(n)) {
      if (auto s = r_.one_of(n, {"allow", "deny", "local"}))
        rc.store_error = *s == "deny" ? on_store_error::deny : *s == "local" ? on_store_error::local : on_store_error::allow;
    }
    if (auto n = o.get("response"); present(n)) response(n, rc.response);
    if (auto n = o.get("limits"); present(n)) limits(n, rc);
    for (auto& l : rc.limits) {
      l.index = limit_count_++;
      l.rate_policy = rate_policy_item(l, quota(l));
      for (auto& p : l.plans) {
        p.index = l.index;
        p.rate_policy = rate_policy_item(p, quota(p));
      }
    }
    if (limit_count_ > caps::limits) {
      r_.error(rn, "a configuration has at most " + std::to_string(caps::limits) + " limits in all its routes, route '" +
                       rc.name + "' goes past that");
      return;
    }
    rc.slot = c.routes.size();
    if (!rc.match.path.empty()) exact_paths_[rc.match.path].push_back(rc.slot);
    c.routes.push_back(std::move(rc));
  }
}

// The earlier route that takes every request of exact path `m.path` ("/a/") because
// it is exact "/a", which the router lets take "/a/" too, with the same host or none
// and methods that cover m's; or nothing. (An identical earlier path is not this
// rule's.)
// Only an earlier exact path one slash shorter can: looked up, not searched for.
std::optional<std::string> route_loader::shadowed_by_slash(const config& c, const route_match& m) const {
  if (m.path.size() < 2 || m.path.back() != '/') return std::nullopt;
  auto earlier = exact_paths_.find(m.path.substr(0, m.path.size() - 1));
  if (earlier == exact_paths_.end()) return std::nullopt;
  const auto host = routing::normalize_host(m.host);
  for (auto i : earlier->second) {
    const auto& e = c.routes[i];
    if (e.match.path.empty() || e.match.path == m.path || !routing::exact_path_takes(e.match.path, m.path)) continue;
    if (auto h = routing::normalize_host(e.match.host); !h.empty() && h != host) continue;
    if (!e.match.methods.empty() &&
        (m.methods.empty() || !std::all_of(m.methods.begin(), m.methods.end(), [&](const std::string& x) {
          return routing::methods_take(e.match.methods, x);
        })))
      continue;
    return e.name;
  }
  return std::nullopt;
}

void route_loader::match(const YAML::Node& node, route_match& m) {
  yaml_reader::object o(r_, node, "match");
  if (!o.ok()) return;
  auto path = o.get("path");
  auto prefix = o.get("path_prefix");
  std::optional<std::string> path_s, prefix_s;
  if (present(path)) set(m.path, path_s = r_.string(path));
  if (present(prefix)) set(m.path_prefix, prefix_s = r_.string(prefix));
  if (present(path) && present(prefix)) r_.error(prefix, "match takes path or path_prefix, not both");
  else if (!present(path) && !present(prefix)) r_.error(node, "match needs path or path_prefix");
  for (auto [n, v] : {std::pair{path, &path_s}, std::pair{prefix, &prefix_s}}) {
    if (*v && (v->value().empty() || v->value().front() != '/')) r_.error(n, "path must start with '/'");
    // Requests are matched with their path parameters dropped (see routing).
    else if (*v && v->value().find(';') != std::string::npos)
      r_.error(n, "a path cannot contain ';' (requests are matched with their path parameters, ';' up to the "
                  "next '/', dropped, as servlet containers do: only a request spelling it %3B would match)");
    else if (*v) {
      // Requests are matched normalised: a path that normalisation changes is never
      // seen. A prefix is checked with a character after it, so that "/." (which
      // matches "/.well-known") is no dot segment.
      const bool is_prefix = v == &prefix_s;
      std::string want = v->value() + (is_prefix ? "x" : ""), seen;
      if (!routing::normalize_target_path(want, seen)) {
        r_.error(n, "invalid path '" + v->value() + "'");
      } else if (seen != want) {
        if (is_prefix) seen.pop_back();
        r_.error(n, "requests are matched normalised, so '" + v->value() + "' is never seen: write '" + seen + "'");
      }
    }
  }
  if (auto n = o.get("methods"); present(n)) {
    for (const auto& item : r_.list(n, true)) {
      auto s = r_.string(item);
      if (!s) continue;
      std::string up;
      for (char ch : *s) up += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (!util::is_token(up)) r_.error(item, "invalid method '" + *s + "'");
      else m.methods.push_back(up);
    }
  }
  if (auto n = o.get("host"); present(n)) {
    set(m.host, r_.string(n));
    std::transform(m.host.begin(), m.host.end(), m.host.begin(), [](unsigned char ch) { return std::tolower(ch); });
  }
}

void route_loader::response(const YAML::Node& node, response_config& rc) {
  yaml_reader::object o(r_, node, "response");
  if (auto n = o.get("status"); present(n)) set(rc.status, r_.unsigned_int(n, 400, 599));
  if (auto n = o.get("grpc_status"); present(n)) set(rc.grpc_status, r_.unsigned_int(n, 1, 16));
  auto format = o.get("format");
  if (present(format))
    if (auto f = r_.one_of(format, {"problem", "text"})) rc.format = *f == "text" ? body_format::text : body_format::problem;
  if (auto n = o.get("body"); present(n)) {
    if (present(format)) r_.error(n, "response.body is the route's own body: it goes without response.format");
    set(rc.body, r_.string(n));
    rc.format = body_format::custom;
    if (rc.body.size() > 16 * 1024) r_.error(n, "response.body is at most 16 KiB");
  }
  if (auto n = o.get("content_type"); present(n)) {
    set(rc.content_type, r_.string(n));
    // (written into the answer's head as it is)
    if (rc.content_type.empty() || rc.content_type.size() > 255 ||
        std::any_of(rc.content_type.begin(), rc.content_type.end(), [](unsigned char c) { return c < ' ' || c == 0x7f; }))
      r_.error(n, "response.content_type must be a media type on one line (at most 255 characters)");
  }
  if (auto n = o.get("headers"); present(n)) {
    if (auto s = r_.one_of(n, {"ietf", "legacy", "both", "none"}))
      rc.headers = *s == "legacy" ? headers_mode::legacy : *s == "both" ? headers_mode::both
                 : *s == "none" ? headers_mode::none : headers_mode::ietf;
  }
}

std::optional<key_source> key_source_of(yaml_reader& r_, const YAML::Node& n) {
  auto s = r_.string(n);
  if (!s) return std::nullopt;
  if (*s == "global") return key_source{key_source::kind::global, {}};
  if (*s == "ip") return key_source{key_source::kind::ip, {}};
  if (*s == "client_cert") {
    if (!r_.client_certificates)
      r_.error(n, "key client_cert needs tls.client_ca: without it no request carries a verified certificate, "
                  "and every request would share one key");
    return key_source{key_source::kind::client_cert, {}};
  }
  auto colon = s->find(':');
  auto kind = s->substr(0, colon);
  auto name = colon == std::string::npos ? std::string() : s->substr(colon + 1);
  std::optional<key_source::kind> k;
  if (kind == "header") k = key_source::kind::header;
  else if (kind == "query") k = key_source::kind::query;
  else if (kind == "cookie") k = key_source::kind::cookie;
  if (!k || name.empty() || (*k == key_source::kind::header && !util::is_token(name))) {
    std::string msg = "invalid key '" + *s + "', expected global, ip, header:<Name>, query:<name>, cookie:<name> or "
                      "client_cert";
    if (auto hint = did_you_mean(kind, {"global", "ip", "header", "query", "cookie", "client_cert"}); hint && !k)
      msg += " (did you mean '" + *hint + (*hint == "global" || *hint == "ip" || *hint == "client_cert" ? "" : ":") +
             "'?)";
    r_.error(n, msg);
    return std::nullopt;
  }
  return key_source{*k, name};
}

std::optional<key_source> route_loader::key(const YAML::Node& n) { return key_source_of(r_, n); }

// on_exceed: reject | delay, and max_delay (gcra and token_bucket, at most a minute).
void route_loader::on_exceed(yaml_reader::object& o, limit_config& l, const std::optional<std::string>& algo) {
  const auto n = o.get("on_exceed"), d = o.get("max_delay");
  bool delay = false;
  if (present(n))
    if (auto v = r_.one_of(n, {"reject", "delay"})) delay = *v == "delay";
  if (!delay) {
    if (present(d)) r_.error(d, "max_delay is read with on_exceed: delay only");
    return;
  }
  if (algo && !rate_based(l)) r_.error(n, "on_exceed: delay is for gcra and token_bucket");
  if (!present(d)) {
    r_.error(n, "on_exceed: delay needs max_delay (how long a request may wait for its turn, e.g. 500ms)");
    return;
  }
  set(l.max_delay, positive_duration(r_, d));
  if (l.max_delay > std::chrono::minutes(1)) r_.error(d, "max_delay is at most 1m");
  // A drain waits for waiting requests up to http.drain_timeout: a longer wait is cut.
  else if (l.max_delay >= drain_timeout_)
    r_.error(d, "max_delay must be shorter than http.drain_timeout (" + std::to_string(drain_timeout_.count()) +
                    "ms): a drain would cut the waits");
}

// align: calendar and timezone: a fixed_window of 1d, 1w or 1mo ending at midnight in a zone.
void route_loader::calendar(yaml_reader::object& o, limit_config& l, const YAML::Node& window_n, bool month) {
  const auto align_n = o.get("align"), tz_n = o.get("timezone");
  bool calendar = false;
  if (present(align_n))
    if (auto a = r_.one_of(align_n, {"rolling", "calendar"})) calendar = *a == "calendar";
  if (month && !calendar) r_.error(window_n, "window: 1mo is a calendar month: it goes with align: calendar");
  if (present(tz_n)) {
    if (!calendar) r_.error(tz_n, "timezone is read with align: calendar only");
    if (auto z = r_.string(tz_n)) {
      if (!valid_timezone(*z)) r_.error(tz_n, "unknown timezone '" + *z + "' (an IANA name, e.g. Europe/Berlin, UTC)");
      else l.timezone = *z;
    }
  }
  if (!calendar) return;
  using namespace std::chrono;
  if (l.algo != algorithm::fixed_window) r_.error(align_n, "align: calendar is for fixed_window");
  else if (month) l.calendar = limit_config::period::month;
  else if (l.window == hours(24)) l.calendar = limit_config::period::day;
  else if (l.window == hours(24 * 7)) l.calendar = limit_config::period::week;
  else r_.error(present(window_n) ? window_n : align_n, "align: calendar takes window: 1d, 1w or 1mo");
}

// cost: a whole number, header:<Name> (the request's) or body_bytes.
void route_loader::cost(const YAML::Node& n, limit_config& l, const std::optional<std::string>& algo) {
  // A lease is one in-flight request: there is nothing for a cost to weigh.
  if (algo && *algo == "concurrency") r_.error(n, "'cost' is not used by concurrency (each request holds one lease)");
  const auto text = n.IsScalar() ? n.Scalar() : std::string();
  if (text == "body_bytes") {
    l.cost_from = limit_config::cost_kind::body_bytes;
  } else if (text.starts_with("header:")) {
    l.cost_from = limit_config::cost_kind::header;
    l.cost_header = text.substr(7);
    if (!util::is_token(l.cost_header)) r_.error(n, "invalid cost header name '" + l.cost_header + "'");
  } else {
    set(l.cost, r_.unsigned_int(n, 1, 1'000'000'000));
  }
}

void route_loader::limits(const YAML::Node& node, route_config& rc) {
  if (!node.IsSequence()) {
    r_.error(node, "limits must be a list");
    return;
  }
  // Every limit of a route is checked in one script call, its answer unpacked on Lua's
  // bounded stack; no real route comes near this.
  if (!r_.within(node, caps::limits_per_route, "a route", "limits")) return;
  std::set<std::string> names;
  std::size_t index = 0;
  for (const auto& ln : node) {
    limit_config l;
    ++index;
    if (!present(ln)) r_.error(node, "limit #" + std::to_string(index) + " is empty (a limit must be a mapping)");
    yaml_reader::object o(r_, ln, "a limit");
    if (!o.ok()) continue;
    auto name = o.get("name");
    if (present(name)) {
      set(l.name, r_.string(name));
      if (!util::is_name(l.name)) r_.error(name, "invalid limit name '" + l.name + "' (letters, digits, - _ .)");
      else if (!names.insert(l.name).second) r_.error(name, "duplicate limit name '" + l.name + "' in route '" + rc.name + "'");
    } else {
      r_.error(ln, "limit needs a name");
    }
    auto algo_node = o.get("algorithm");
    std::optional<std::string> algo;
    if (present(algo_node))
      algo = r_.one_of(algo_node, {"fixed_window", "sliding_log", "sliding_window", "token_bucket", "gcra", "concurrency"});
    else r_.error(ln, "limit '" + l.name + "' needs an algorithm");
    if (algo) {
      static const std::pair<const char*, algorithm> table[] = {
          {"fixed_window", algorithm::fixed_window}, {"sliding_log", algorithm::sliding_log},
          {"sliding_window", algorithm::sliding_window}, {"token_bucket", algorithm::token_bucket},
          {"gcra", algorithm::gcra}, {"concurrency", algorithm::concurrency}};
      for (auto& [n, a] : table)
        if (*algo == n) l.algo = a;
    }
    if (auto n = o.get("key"); present(n)) {
      l.key.clear();
      for (const auto& item : r_.list(n, true))
        if (auto k = key(item)) l.key.push_back(*k);
      if (l.key.empty() && n.IsSequence()) r_.error(n, "key must not be empty");
    }
    auto limit_n = o.get("limit");
    auto window_n = o.get("window");
    auto rate_n = o.get("rate");
    auto burst_n = o.get("burst");
    if (present(limit_n)) set(l.limit, r_.unsigned_int(limit_n, 1, 1'000'000'000));
    // 1mo is a calendar month: there is no duration for it.
    const bool month = present(window_n) && window_n.IsScalar() && window_n.Scalar() == "1mo";
    if (month) l.window = std::chrono::hours(24 * 30);
    else if (present(window_n)) set(l.window, positive_duration(r_, window_n));
    if (present(rate_n)) set(l.rate_, r_.parsed<rate>(rate_n, parse_rate, "rate (want e.g. 10/s, 600/m, 1000/h)"));
    if (present(burst_n)) set(l.burst, r_.unsigned_int(burst_n, 1, 1'000'000'000));
    if (auto n = o.get("cost"); present(n)) cost(n, l, algo);
    if (auto n = o.get("charge"); present(n)) {
      auto v = r_.string(n);
      if (v && (!v->starts_with("response_header:") || !util::is_token(v->substr(16))))
        r_.error(n, "charge is response_header:<Name> (a response header whose number is charged after the response)");
      else if (v) l.charge_header = v->substr(16);
    }
    if ((l.cost_from != limit_config::cost_kind::fixed || !l.charge_header.empty()) && algo && !takes_any_cost(l))
      r_.error(ln, "limit '" + l.name + "': a cost from the request or the response is for fixed_window, "
                   "sliding_window, token_bucket and gcra (not " + *algo + ")");
    if (auto n = o.get("shadow"); present(n)) set(l.shadow, r_.boolean(n));
    on_exceed(o, l, algo);
    if (auto n = o.get("on_missing_key"); present(n)) {
      if (auto s = r_.one_of(n, {"anonymous", "skip"}))
        l.missing_key = *s == "skip" ? on_missing_key::skip : on_missing_key::anonymous;
    }
    if (algo) check_algorithm_keys(ln, *algo, l, limit_n, window_n, rate_n, burst_n);
    calendar(o, l, window_n, month);
    if (auto n = o.get("plans"); present(n)) load_plans(r_, n, l);
    rc.limits.push_back(std::move(l));
  }
}

void route_loader::check_algorithm_keys(const YAML::Node& ln, const std::string& algo, limit_config& l,
                                        const YAML::Node& limit_n, const YAML::Node& window_n,
                                        const YAML::Node& rate_n, const YAML::Node& burst_n) {
  if (rate_based(l)) {
    if (!present(rate_n)) r_.error(ln, "limit '" + l.name + "': " + algo + " needs rate (e.g. rate: 10/s)");
    for (auto [n, k] : {std::pair{limit_n, "limit"}, std::pair{window_n, "window"}})
      if (present(n)) r_.error(n, "'" + std::string(k) + "' is not used by " + algo + " (it takes rate and burst)");
    if (!present(burst_n)) l.burst = l.rate_.count;
    if (l.burst && l.cost > l.burst) r_.error(ln, "limit '" + l.name + "': cost is larger than burst, so every request would be denied");
    return;
  }
  for (auto [n, k] : {std::pair{rate_n, "rate"}, std::pair{burst_n, "burst"}})
    if (present(n)) r_.error(n, "'" + std::string(k) + "' is not used by " + algo + " (it takes limit and window)");
  if (!present(limit_n)) r_.error(ln, "limit '" + l.name + "': " + algo + " needs limit");
  if (l.algo == algorithm::concurrency) {
    // window is the lease lifetime: how long a dead gateway's leases survive it.
    if (!present(window_n)) l.window = std::chrono::seconds(60);
  } else if (!present(window_n)) {
    r_.error(ln, "limit '" + l.name + "': " + algo + " needs window (e.g. window: 1m)");
  }
  if (l.limit && l.cost > l.limit) r_.error(ln, "limit '" + l.name + "': cost is larger than limit, so every request would be denied");
}

}  // namespace fg::config::detail
