#include "config/loader.hpp"

#include "util/text.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "config/duration.hpp"
#include "net/cidr.hpp"
#include "match/rules.hpp"

namespace fg::config {
namespace {

bool present(const YAML::Node& n) { return n && !n.IsNull(); }

class loader {
 public:
  loader(std::string file, std::vector<diagnostic>& errors) : r_(std::move(file), errors) {}

  void load(const YAML::Node& root, config& c) {
    if (!present(root)) {
      r_.error(YAML::Mark{}, "the configuration is empty");
      return;
    }
    yaml_reader::object top(r_, root, "the configuration");
    if (!top.ok()) return;
    if (auto n = top.get("listen"); present(n)) set(c.listen, r_.parsed<endpoint>(n, parse_endpoint, "listen address (want host:port)"));
    if (auto n = top.get("workers"); present(n)) set(c.workers, r_.unsigned_int(n, 0, 256));
    if (auto n = top.get("admin"); present(n)) admin(n, c.admin);
    if (auto n = top.get("log"); present(n)) log(n, c.log);
    if (auto n = top.get("store"); present(n)) {
      if (auto s = r_.one_of(n, {"memory", "redis"})) c.store = *s == "redis" ? store_kind::redis : store_kind::memory;
    }
    if (auto n = top.get("memory"); present(n)) {
      yaml_reader::object o(r_, n, "memory");
      if (auto m = o.get("max_keys"); present(m)) set(c.memory.max_keys, r_.unsigned_int(m, 1024, 100'000'000));
    }
    if (auto n = top.get("redis"); present(n)) redis(n, c.redis);
    if (auto n = top.get("client_ip"); present(n)) client_ip(n, c.client_ip);
    if (auto n = top.get("http"); present(n)) http(n, c.http);
    auto ups = top.get("upstreams");
    if (present(ups)) upstreams(ups, c);
    else r_.error(root, "missing required key 'upstreams'");
    auto routes_node = top.get("routes");
    if (present(routes_node)) routes(routes_node, c);
    else r_.error(root, "missing required key 'routes'");
  }

 private:
  template <class T, class U>
  static void set(T& dst, const std::optional<U>& v) {
    if (v) dst = static_cast<T>(*v);
  }

  std::optional<duration> positive_duration(const YAML::Node& n) {
    auto d = r_.parsed<duration>(n, parse_duration, "duration (want e.g. 250ms, 5s, 1m, 1h)");
    if (d && d->count() <= 0) {
      r_.error(n, "duration must be greater than zero");
      return std::nullopt;
    }
    return d;
  }

  void admin(const YAML::Node& node, admin_config& a) {
    yaml_reader::object o(r_, node, "admin");
    if (auto n = o.get("listen"); present(n)) a.listen = r_.parsed<endpoint>(n, parse_endpoint, "listen address (want host:port)");
  }

  void log(const YAML::Node& node, log_config& l) {
    yaml_reader::object o(r_, node, "log");
    if (auto n = o.get("level"); present(n)) set(l.level, r_.one_of(n, {"trace", "debug", "info", "warn", "error"}));
    if (auto n = o.get("access_log"); present(n)) set(l.access_log, r_.string(n));
    if (auto n = o.get("format"); present(n)) {
      if (auto s = r_.one_of(n, {"text", "json"})) l.format = *s == "json" ? log_format::json : log_format::text;
    }
  }

  void redis(const YAML::Node& node, redis_config& rc) {
    yaml_reader::object o(r_, node, "redis");
    auto mode_node = o.get("mode");
    if (present(mode_node)) {
      if (auto s = r_.one_of(mode_node, {"standalone", "cluster", "sentinel"}))
        rc.mode = *s == "cluster" ? redis_mode::cluster : *s == "sentinel" ? redis_mode::sentinel : redis_mode::standalone;
    }
    if (auto n = o.get("addresses"); present(n)) {
      rc.addresses.clear();
      for (const auto& item : r_.list(n, true))
        if (auto e = r_.parsed<endpoint>(item, parse_endpoint, "Redis address (want host:port)")) rc.addresses.push_back(*e);
      if (rc.addresses.empty() && n.IsSequence()) r_.error(n, "redis.addresses must not be empty");
    }
    auto master = o.get("master_name");
    if (present(master)) set(rc.master_name, r_.string(master));
    if (rc.mode == redis_mode::sentinel && rc.master_name.empty())
      r_.error(present(mode_node) ? mode_node : node, "redis.mode sentinel needs redis.master_name");
    if (auto n = o.get("username"); present(n)) set(rc.username, r_.string(n));
    if (auto n = o.get("password"); present(n)) set(rc.password, r_.string(n));
    if (auto n = o.get("sentinel_username"); present(n)) set(rc.sentinel_username, r_.string(n));
    if (auto n = o.get("sentinel_password"); present(n)) set(rc.sentinel_password, r_.string(n));
    if (auto n = o.get("database"); present(n)) set(rc.database, r_.unsigned_int(n, 0, 1023));
    if (auto n = o.get("timeout"); present(n)) set(rc.timeout, positive_duration(n));
    if (auto n = o.get("key_prefix"); present(n)) set(rc.key_prefix, r_.string(n));
    if (rc.mode == redis_mode::cluster) {
      // A cluster has one database; a brace in the prefix would be every key's hash tag.
      auto at = [&](const char* k) { return present(o.get(k)) ? o.get(k) : node; };
      if (rc.database != 0) r_.error(at("database"), "redis.database must be 0 with redis.mode cluster");
      if (rc.key_prefix.find_first_of("{}") != std::string::npos)
        r_.error(at("key_prefix"), "redis.key_prefix must not contain '{' or '}' with redis.mode cluster");
    }
  }

  void client_ip(const YAML::Node& node, client_ip_config& ci) {
    yaml_reader::object o(r_, node, "client_ip");
    if (auto n = o.get("trusted_proxies"); present(n)) {
      for (const auto& item : r_.list(n, true)) {
        auto s = r_.string(item);
        if (!s) continue;
        if (!net::parse_cidr(*s)) r_.error(item, "invalid CIDR '" + *s + "' (want e.g. 10.0.0.0/8 or 2001:db8::/32)");
        else ci.trusted_proxies.push_back(*s);
      }
    }
    if (auto n = o.get("headers"); present(n)) {
      ci.headers.clear();
      for (const auto& item : r_.list(n, true)) {
        auto s = r_.string(item);
        if (s && !util::is_token(*s)) r_.error(item, "invalid header name '" + *s + "'");
        else if (s) ci.headers.push_back(*s);
      }
    }
    if (auto n = o.get("ipv6_prefix"); present(n)) set(ci.ipv6_prefix, r_.unsigned_int(n, 1, 128));
    if (auto n = o.get("forward"); present(n)) {
      auto s = r_.string(n);
      static constexpr std::string_view reserved[] = {
          "Host", "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "TE", "Trailer", "Expect",
          "Keep-Alive", "Proxy-Connection", "Forwarded", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Request-Id",
          "Cookie", "Authorization"};
      if (s && !s->empty() && !util::is_token(*s)) r_.error(n, "invalid header name '" + *s + "'");
      else if (s && std::any_of(std::begin(reserved), std::end(reserved),
                                [&](std::string_view h) { return util::iequals_folded(*s, h); }))
        r_.error(n, "client_ip.forward cannot be '" + *s + "': the gateway reads or sets that header itself");
      else if (s) ci.forward = *s;
    }
    if (auto n = o.get("forward_chain"); present(n)) {
      auto s = r_.string(n);
      if (s && *s == "from_client") ci.forward_chain = client_ip_config::chain::from_client;
      else if (s && *s == "full") ci.forward_chain = client_ip_config::chain::full;
      else if (s) r_.error(n, "forward_chain must be from_client or full");
    }
  }

  void http(const YAML::Node& node, http_config& h) {
    yaml_reader::object o(r_, node, "http");
    if (auto n = o.get("max_header_bytes"); present(n)) {
      auto v = r_.parsed<std::uint64_t>(n, parse_size, "size (want e.g. 16384 or 16k)");
      if (v && (*v < 1024 || *v > 1024 * 1024)) r_.error(n, "max_header_bytes must be from 1024 to 1048576");
      else set(h.max_header_bytes, v);
    }
    if (auto n = o.get("max_body_bytes"); present(n))
      set(h.max_body_bytes, r_.parsed<std::uint64_t>(n, parse_size, "size (want e.g. 0, 1048576 or 10m)"));
    if (auto n = o.get("header_timeout"); present(n)) set(h.header_timeout, positive_duration(n));
    if (auto n = o.get("idle_timeout"); present(n)) set(h.idle_timeout, positive_duration(n));
    if (auto n = o.get("drain_timeout"); present(n)) set(h.drain_timeout, positive_duration(n));
    if (auto n = o.get("max_connections"); present(n)) set(h.max_connections, r_.unsigned_int(n, 0, 10'000'000));
  }

  void upstreams(const YAML::Node& node, config& c) {
    if (!node.IsMap()) {
      r_.error(node, "upstreams must be a mapping of name to upstream");
      return;
    }
    for (auto it = node.begin(); it != node.end(); ++it) {
      upstream_config u;
      u.name = it->first.Scalar();
      if (!util::is_name(u.name)) r_.error(it->first, "invalid upstream name '" + u.name + "' (letters, digits, - _ .)");
      else if (std::any_of(c.upstreams.begin(), c.upstreams.end(), [&](auto& x) { return x.name == u.name; }))
        r_.error(it->first, "duplicate upstream name '" + u.name + "'");
      yaml_reader::object o(r_, it->second, "upstream '" + u.name + "'");
      if (!present(it->second)) r_.error(it->first, "upstream '" + u.name + "' needs an address");
      if (!o.ok()) {
        c.upstreams.push_back(std::move(u));  // keep the name known: routes using it get no second error
        continue;
      }
      auto addr = o.get("address");
      if (present(addr)) set(u.address, r_.parsed<endpoint>(addr, parse_endpoint, "upstream address (want host:port)"));
      else r_.error(it->first, "upstream '" + u.name + "' needs an address");
      if (auto n = o.get("connect_timeout"); present(n)) set(u.connect_timeout, positive_duration(n));
      if (auto n = o.get("response_timeout"); present(n)) set(u.response_timeout, positive_duration(n));
      if (auto n = o.get("max_idle"); present(n)) set(u.max_idle, r_.unsigned_int(n, 0, 100000));
      c.upstreams.push_back(std::move(u));
    }
  }

  void routes(const YAML::Node& node, config& c) {
    if (!node.IsSequence()) {
      r_.error(node, "routes must be a list");
      return;
    }
    if (node.size() == 0) r_.error(node, "routes must not be empty");
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
        if (auto by = shadowed_by_slash(c.routes, rc.match))
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
      for (auto& l : rc.limits) l.index = limit_count_++;
      rc.slot = c.routes.size();
      c.routes.push_back(std::move(rc));
    }
  }

  // The earlier route that takes every request of exact path `m.path` ("/a/") because
  // it is exact "/a", which the router lets take "/a/" too, with the same host or none
  // and methods that cover m's; or nothing. (An identical earlier path is not this
  // rule's.)
  static std::optional<std::string> shadowed_by_slash(const std::vector<route_config>& earlier, const route_match& m) {
    if (m.path.empty()) return std::nullopt;
    const auto host = match::normalize_host(m.host);
    for (const auto& e : earlier) {
      if (e.match.path.empty() || e.match.path == m.path || !match::exact_path_takes(e.match.path, m.path)) continue;
      if (auto h = match::normalize_host(e.match.host); !h.empty() && h != host) continue;
      if (!e.match.methods.empty() &&
          (m.methods.empty() || !std::all_of(m.methods.begin(), m.methods.end(), [&](const std::string& x) {
            return match::methods_take(e.match.methods, x);
          })))
        continue;
      return e.name;
    }
    return std::nullopt;
  }

  void match(const YAML::Node& node, route_match& m) {
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
        if (!match::normalize_target_path(want, seen)) {
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

  void response(const YAML::Node& node, response_config& rc) {
    yaml_reader::object o(r_, node, "response");
    if (auto n = o.get("status"); present(n)) set(rc.status, r_.unsigned_int(n, 400, 599));
    if (auto n = o.get("body"); present(n)) set(rc.body, r_.string(n));
    if (auto n = o.get("content_type"); present(n)) set(rc.content_type, r_.string(n));
    if (auto n = o.get("headers"); present(n)) {
      if (auto s = r_.one_of(n, {"ietf", "legacy", "both", "none"}))
        rc.headers = *s == "legacy" ? headers_mode::legacy : *s == "both" ? headers_mode::both
                   : *s == "none" ? headers_mode::none : headers_mode::ietf;
    }
  }

  std::optional<key_source> key(const YAML::Node& n) {
    auto s = r_.string(n);
    if (!s) return std::nullopt;
    if (*s == "global") return key_source{key_source::kind::global, {}};
    if (*s == "ip") return key_source{key_source::kind::ip, {}};
    auto colon = s->find(':');
    auto kind = s->substr(0, colon);
    auto name = colon == std::string::npos ? std::string() : s->substr(colon + 1);
    std::optional<key_source::kind> k;
    if (kind == "header") k = key_source::kind::header;
    else if (kind == "query") k = key_source::kind::query;
    else if (kind == "cookie") k = key_source::kind::cookie;
    if (!k || name.empty() || (*k == key_source::kind::header && !util::is_token(name))) {
      std::string msg = "invalid key '" + *s + "', expected global, ip, header:<Name>, query:<name> or cookie:<name>";
      if (auto hint = did_you_mean(kind, {"global", "ip", "header", "query", "cookie"}); hint && !k)
        msg += " (did you mean '" + *hint + (*hint == "global" || *hint == "ip" ? "" : ":") + "'?)";
      r_.error(n, msg);
      return std::nullopt;
    }
    return key_source{*k, name};
  }

  void limits(const YAML::Node& node, route_config& rc) {
    if (!node.IsSequence()) {
      r_.error(node, "limits must be a list");
      return;
    }
    // Every limit of a route is checked in one script call, its answer unpacked on Lua's
    // bounded stack; no real route comes near this.
    constexpr std::size_t max_limits = 64;
    if (node.size() > max_limits)
      r_.error(node, "a route has at most " + std::to_string(max_limits) + " limits, this one has " +
                         std::to_string(node.size()));
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
      if (present(window_n)) set(l.window, positive_duration(window_n));
      if (present(rate_n)) set(l.rate_, r_.parsed<rate>(rate_n, parse_rate, "rate (want e.g. 10/s, 600/m, 1000/h)"));
      if (present(burst_n)) set(l.burst, r_.unsigned_int(burst_n, 1, 1'000'000'000));
      if (auto n = o.get("cost"); present(n)) {
        set(l.cost, r_.unsigned_int(n, 1, 1'000'000'000));
        // A lease is one in-flight request: there is nothing for a cost to weigh.
        if (algo && *algo == "concurrency") r_.error(n, "'cost' is not used by concurrency (each request holds one lease)");
      }
      if (auto n = o.get("shadow"); present(n)) set(l.shadow, r_.boolean(n));
      if (auto n = o.get("on_missing_key"); present(n)) {
        if (auto s = r_.one_of(n, {"anonymous", "skip"}))
          l.missing_key = *s == "skip" ? on_missing_key::skip : on_missing_key::anonymous;
      }
      if (algo) check_algorithm_keys(ln, *algo, l, limit_n, window_n, rate_n, burst_n);
      rc.limits.push_back(std::move(l));
    }
  }

  void check_algorithm_keys(const YAML::Node& ln, const std::string& algo, limit_config& l, const YAML::Node& limit_n,
                            const YAML::Node& window_n, const YAML::Node& rate_n, const YAML::Node& burst_n) {
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

  yaml_reader r_;
  std::size_t limit_count_ = 0;  // limits numbered so far (limit_config::index)
};

load_result parse(const std::string& text, const std::string& name) {
  load_result out;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    out.errors.push_back({name, e.mark.line + 1, e.mark.column + 1, e.msg});
    return out;
  }
  auto c = std::make_shared<config>();
  c->source = name;
  c->hash = util::fnv1a_hex(text);
  loader l(name, out.errors);
  l.load(root, *c);
  if (out.errors.empty()) out.cfg = std::move(c);
  std::stable_sort(out.errors.begin(), out.errors.end(), [](const diagnostic& a, const diagnostic& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  return out;
}

}  // namespace

load_result load_string(const std::string& text, const std::string& name) { return parse(text, name); }

load_result load_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    load_result out;
    out.errors.push_back({path, 0, 0, "cannot open file"});
    return out;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

}  // namespace fg::config
