#include "config/loader.hpp"

#include "util/text.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>

#include <boost/asio/ip/address.hpp>
#include <date/tz.h>

#include "config/caps.hpp"
#include "config/duration.hpp"
#include "config/loader_parts.hpp"
#include "net/http_url.hpp"
#include "config/source_file.hpp"
#include "net/cidr.hpp"

namespace fg::config {

std::optional<duration> detail::positive_duration(yaml_reader& r, const YAML::Node& n) {
  auto d = r.parsed<duration>(n, parse_duration, "duration (want e.g. 250ms, 5s, 1m, 1h)");
  if (d && d->count() <= 0) {
    r.error(n, "duration must be greater than zero");
    return std::nullopt;
  }
  return d;
}

bool detail::valid_timezone(const std::string& name) {
  try {
    return date::locate_zone(name) != nullptr;
  } catch (const std::exception&) {
    return false;
  }
}

std::optional<std::string> detail::file_path(yaml_reader& r, const YAML::Node& n) {
  auto v = r.string(n);
  if (!v || v->empty()) return v;
  std::filesystem::path p(*v);
  return p.is_absolute() ? *v : (std::filesystem::path(r.file()).parent_path() / p).string();
}

namespace {

using detail::file_path;
using detail::present;
using detail::set;

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
    if (auto n = top.get("http2"); present(n)) http2(n, c.http2);
    if (auto n = top.get("tracing"); present(n)) tracing(n, c.tracing);
    if (auto n = top.get("resolver"); present(n)) resolver(n, c.resolver);
    if (auto n = top.get("tls"); present(n)) tls(n, c.tls);
    r_.client_certificates = !c.tls.client_ca.empty();
    auto ups = top.get("upstreams");
    if (present(ups)) upstreams(ups, c);
    else r_.error(root, "missing required key 'upstreams'");
    auto routes_node = top.get("routes");
    if (present(routes_node)) detail::route_loader(r_).routes(routes_node, c);
    else r_.error(root, "missing required key 'routes'");
  }

 private:
  std::optional<duration> positive_duration(const YAML::Node& n) { return detail::positive_duration(r_, n); }

  // A duration from `lo` to `hi`; outside, an error naming section + what and the range.
  std::optional<duration> bounded_duration(const YAML::Node& n, duration lo, duration hi, const char* section,
                                           const char* what) {
    auto d = positive_duration(n);
    if (d && (*d < lo || *d > hi)) {
      r_.error(n, std::string(section) + what + " must be from " + std::to_string(lo.count()) + "ms to " +
                      std::to_string(hi.count() / 1000) + "s");
      return std::nullopt;
    }
    return d;
  }

  std::optional<rate> positive_rate(const YAML::Node& n) {
    auto v = r_.parsed<rate>(n, parse_rate, "rate (want e.g. 10/s, 600/m, 1000/h)");
    if (v && v->count == 0) {
      r_.error(n, "rate must be greater than zero");
      return std::nullopt;
    }
    return v;
  }

  void admin(const YAML::Node& node, admin_config& a) {
    yaml_reader::object o(r_, node, "admin");
    auto listen = o.get("listen");
    if (present(listen)) a.listen = r_.parsed<endpoint>(listen, parse_endpoint, "listen address (want host:port)");
    if (auto n = o.get("token"); present(n)) {
      set(a.token, r_.string(n));
      // A guessable credential is none: 16 characters is 96 bits of base64.
      if (!a.token.empty() && a.token.size() < 16)
        r_.error(n, "admin.token is " + std::to_string(a.token.size()) +
                        " characters; use at least 16 (e.g. `openssl rand -hex 32`)");
    }
    if (auto n = o.get("hosts"); present(n)) {
      for (const auto& item : r_.list(n, true))
        if (auto h = r_.string(item)) {
          std::string lower = *h;
          std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
          if (lower.empty() || lower.find_first_of(" /@[]") != std::string::npos) r_.error(item, "invalid host name '" + *h + "'");
          else a.hosts.push_back(std::move(lower));
        }
    }
    if (auto n = o.get("ready_requires_store"); present(n)) set(a.ready_requires_store, r_.boolean(n));
    if (auto n = o.get("limits_rate"); present(n)) set(a.limits_rate, positive_rate(n));
    if (auto n = o.get("limits_rate_per_peer"); present(n)) set(a.limits_rate_per_peer, positive_rate(n));
    // Off this machine, what changes or reveals the gateway needs a credential.
    if (a.listen && !is_loopback(*a.listen) && a.token.empty())
      r_.error(listen, "admin.listen " + a.listen->str() +
                           " is reachable from other machines, so /config, /limits and POST /reload need a credential: "
                           "set admin.token (e.g. token: \"${ADMIN_TOKEN}\", a long random string such as "
                           "`openssl rand -hex 32` gives), or listen on 127.0.0.1");
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
    if (auto n = o.get("startup_wait"); present(n)) {
      // 0 is allowed: the port opens at once, whatever the store.
      auto d = r_.parsed<duration>(n, parse_duration, "duration (want e.g. 0s, 500ms, 5s)");
      if (d && *d > std::chrono::minutes(10)) r_.error(n, "redis.startup_wait is at most 10m");
      else set(rc.startup_wait, d);
    }
    if (auto n = o.get("sentinel_quorum"); present(n))
      set(rc.sentinel_quorum, r_.unsigned_int(n, 0, std::max<std::size_t>(1, rc.addresses.size())));
    liveness(o, rc);
    if (rc.mode == redis_mode::cluster) {
      // A cluster has one database; a brace in the prefix would be every key's hash tag.
      auto at = [&](const char* k) { return present(o.get(k)) ? o.get(k) : node; };
      if (rc.database != 0) r_.error(at("database"), "redis.database must be 0 with redis.mode cluster");
      if (rc.key_prefix.find_first_of("{}") != std::string::npos)
        r_.error(at("key_prefix"), "redis.key_prefix must not contain '{' or '}' with redis.mode cluster");
    }
  }

  // redis.ping_interval and redis.stall_timeout: how a connection that stopped answering
  // is found (redis/liveness.hpp).
  void liveness(yaml_reader::object& o, redis_config& rc) {
    auto within = [&](const YAML::Node& n, duration lo, duration hi, const char* what) {
      return bounded_duration(n, lo, hi, "redis.", what);
    };
    if (auto n = o.get("ping_interval"); present(n))
      set(rc.ping_interval, within(n, duration{100}, duration{3'600'000}, "ping_interval"));
    if (auto n = o.get("stall_timeout"); present(n)) {
      auto d = within(n, duration{100}, duration{600'000}, "stall_timeout");
      // A reply late by less than a command's own deadline is no stall.
      if (d && *d <= rc.timeout) r_.error(n, "redis.stall_timeout must be longer than redis.timeout");
      else set(rc.stall_timeout, d);
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
    if (auto n = o.get("max_delayed"); present(n)) set(h.max_delayed, r_.unsigned_int(n, 0, 1'000'000));
  }

  void http2(const YAML::Node& node, http2_config& h) {
    yaml_reader::object o(r_, node, "http2");
    if (auto n = o.get("tls"); present(n)) set(h.tls, r_.boolean(n));
    if (auto n = o.get("cleartext"); present(n)) set(h.cleartext, r_.boolean(n));
    if (auto n = o.get("max_concurrent_streams"); present(n))
      set(h.max_concurrent_streams, r_.unsigned_int(n, 1, 10'000));
  }

  void tracing(const YAML::Node& node, tracing_config& t) {
    yaml_reader::object o(r_, node, "tracing");
    if (auto n = o.get("propagate"); present(n)) set(t.propagate, r_.boolean(n));
    if (auto n = o.get("trust_incoming"); present(n)) {
      if (auto s = r_.one_of(n, {"trusted_proxies", "always", "never"}))
        t.trust_incoming = *s == "always" ? tracing_config::trust::always
                           : *s == "never" ? tracing_config::trust::never
                                           : tracing_config::trust::trusted_proxies;
    }
    if (auto n = o.get("sample_ratio"); present(n))
      set(t.sample_ratio, r_.parsed<double>(n, parse_ratio, "ratio from 0 to 1 (e.g. 0.01)"));
    if (auto n = o.get("export"); present(n)) {
      span_export(n, t.exporter);
      // The spans' trace is the one the services are told of.
      if (t.exporter.on() && !t.propagate) r_.error(n, "tracing.export needs tracing.propagate: true");
    }
  }

  void span_export(const YAML::Node& node, span_export_config& e) {
    yaml_reader::object o(r_, node, "tracing.export");
    auto endpoint = o.get("endpoint");
    if (present(endpoint)) {
      if (auto s = r_.string(endpoint)) {
        if (auto url = net::parse_http_url(*s)) {
          e.host = url->host;
          e.port = url->port_number;
          e.target = url->path_given ? url->target : "/v1/traces";  // (OTLP's)
        } else {
          r_.error(endpoint, "tracing.export.endpoint: " + url.error() +
                                 " (want e.g. http://127.0.0.1:4318/v1/traces; https is not supported: send to a "
                                 "collector on this machine or in this pod)");
        }
      }
    } else {
      r_.error(node, "tracing.export needs endpoint (the collector's OTLP/HTTP URL, e.g. "
                     "http://127.0.0.1:4318/v1/traces)");
    }
    if (auto n = o.get("service_name"); present(n)) {
      auto s = r_.string(n);
      if (s && (s->empty() || s->size() > 256)) r_.error(n, "tracing.export.service_name must be 1 to 256 characters");
      else set(e.service_name, s);
    }
    if (auto n = o.get("denied_per_second"); present(n)) set(e.denied_per_second, r_.unsigned_int(n, 0, 100'000));
    if (auto n = o.get("queue"); present(n)) set(e.queue, r_.unsigned_int(n, 1, 1'000'000));
    if (auto n = o.get("batch"); present(n)) set(e.batch, r_.unsigned_int(n, 1, 10'000));
    if (auto n = o.get("interval"); present(n))
      set(e.interval, bounded_duration(n, duration{10}, duration{60'000}, "tracing.export.", "interval"));
    if (auto n = o.get("timeout"); present(n))
      set(e.timeout, bounded_duration(n, duration{10}, duration{60'000}, "tracing.export.", "timeout"));
  }

  static std::optional<double> parse_ratio(std::string_view s) {
    double v = -1;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || !(v >= 0 && v <= 1)) return std::nullopt;
    return v;
  }

  void tls(const YAML::Node& node, tls_config& t) {
    yaml_reader::object o(r_, node, "tls");
    if (!o.ok()) return;
    auto listen = o.get("listen");
    if (present(listen)) t.listen = r_.parsed<endpoint>(listen, parse_endpoint, "listen address (want host:port)");
    else r_.error(node, "tls needs listen (the address of the TLS listener, e.g. \"0.0.0.0:8443\")");
    auto certs = o.get("certificates");
    if (present(certs) && certs.IsSequence() && certs.size() > 0) {
      if (r_.within(certs, 1'000, "tls", "certificates"))
        for (const auto& item : r_.list(certs, true)) certificate(item, t);
    } else {
      r_.error(present(certs) ? certs : node, "tls needs certificates: a list of {cert, key} (PEM files), the "
                                              "first one the default");
    }
    if (auto n = o.get("ciphers"); present(n)) {
      auto v = r_.string(n);
      if (v && (v->empty() || v->find_first_of(" \t\r\n") != std::string::npos))
        r_.error(n, "tls.ciphers must be an OpenSSL cipher list without spaces (e.g. ECDHE-ECDSA-AES128-GCM-SHA256)");
      else set(t.ciphers, v);
    }
    if (auto n = o.get("handshake_timeout"); present(n)) set(t.handshake_timeout, positive_duration(n));
    if (auto n = o.get("max_handshakes"); present(n)) set(t.max_handshakes, r_.unsigned_int(n, 1, 1'000'000));
    if (auto n = o.get("client_ca"); present(n)) set(t.client_ca, file_path(r_, n));
    if (auto n = o.get("client_certificates"); present(n)) {
      if (auto s = r_.one_of(n, {"required", "optional"})) t.clients_optional = *s == "optional";
      if (t.client_ca.empty()) r_.error(n, "tls.client_certificates is read with tls.client_ca only");
    }
  }

  void certificate(const YAML::Node& item, tls_config& t) {
    yaml_reader::object co(r_, item, "a certificate");
    if (!co.ok()) return;
    tls_certificate c;
    c.where = r_.file() + ":" + std::to_string(item.Mark().line + 1);
    if (auto n = co.get("cert"); present(n)) set(c.cert, file_path(r_, n));
    if (auto n = co.get("key"); present(n)) set(c.key, file_path(r_, n));
    if (c.cert.empty() || c.key.empty()) r_.error(item, "a certificate needs cert and key (PEM file paths)");
    else t.certificates.push_back(std::move(c));
  }

  void resolver(const YAML::Node& node, resolver_config& rc) {
    yaml_reader::object o(r_, node, "resolver");
    if (auto n = o.get("servers"); present(n)) {
      for (const auto& item : r_.list(n, true)) {
        auto e = r_.parsed<endpoint>(item, parse_endpoint, "name server (want ip:port, e.g. 127.0.0.11:53)");
        boost::system::error_code ec;
        if (e) boost::asio::ip::make_address(e->host, ec);
        if (e && ec) r_.error(item, "name server '" + e->host + "' is not an IP address");
        else if (e) rc.servers.push_back(*e);
      }
    }
    auto bounded = [&](const YAML::Node& n, duration lo, duration hi, const char* what) {
      return bounded_duration(n, lo, hi, "resolver.", what);
    };
    if (auto n = o.get("timeout"); present(n)) set(rc.timeout, bounded(n, duration{100}, duration{30'000}, "timeout"));
    if (auto n = o.get("tries"); present(n)) set(rc.tries, r_.unsigned_int(n, 1, 10));
    if (auto n = o.get("refresh"); present(n))
      set(rc.refresh, bounded(n, duration{1'000}, duration{86'400'000}, "refresh"));
  }

  void upstreams(const YAML::Node& node, config& c) { detail::load_upstreams(r_, node, c); }

  yaml_reader r_;
};

load_result parse(const std::string& text, const std::string& name) {
  load_result out;
  YAML::Node root;
  if (text.size() > caps::file_bytes) {
    out.errors.push_back({name, 0, 0, "is " + std::to_string(text.size()) + " bytes; a configuration is at most " +
                                          std::to_string(caps::file_bytes) + " bytes (4 MiB)"});
    return out;
  }
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    out.errors.push_back({name, e.mark.line + 1, e.mark.column + 1, e.msg});
    return out;
  }
  if (auto too_big = detail::check_size(root, name)) {
    out.errors.push_back(std::move(*too_big));
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
  std::string text;
  if (auto problem = read_source_file(path, text)) {
    load_result out;
    out.errors.push_back(std::move(*problem));
    return out;
  }
  return parse(text, path);
}

}  // namespace fg::config
