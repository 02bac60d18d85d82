#include <algorithm>
#include <charconv>

#include "config/caps.hpp"
#include "config/duration.hpp"
#include "config/loader_parts.hpp"
#include "util/text.hpp"

// upstreams: each a name, its servers (`address:` or `servers:`), how one is chosen, when
// one is ejected, and how a failed try goes to another.
namespace fg::config::detail {

namespace {

// A share in [0, 1], written as a decimal ("0.5", "1").
std::optional<double> parse_share(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || !(v >= 0 && v <= 1)) return std::nullopt;
  return v;
}

class upstream_loader {
 public:
  explicit upstream_loader(yaml_reader& r) : r_(r) {}

  void upstream(const YAML::Node& name_n, const YAML::Node& node, config& c) {
    upstream_config u;
    u.name = name_n.Scalar();
    if (!util::is_name(u.name)) r_.error(name_n, "invalid upstream name '" + u.name + "' (letters, digits, - _ .)");
    else if (std::any_of(c.upstreams.begin(), c.upstreams.end(), [&](auto& x) { return x.name == u.name; }))
      r_.error(name_n, "duplicate upstream name '" + u.name + "'");
    yaml_reader::object o(r_, node, "upstream '" + u.name + "'");
    if (!present(node)) r_.error(name_n, "upstream '" + u.name + "' needs an address or servers");
    if (o.ok()) fill(name_n, o, u);
    // (kept when it has errors too: routes using the name get no second error)
    c.upstreams.push_back(std::move(u));
  }

 private:
  void fill(const YAML::Node& name_n, yaml_reader::object& o, upstream_config& u) {
    auto addr = o.get("address");
    auto servers_n = o.get("servers");
    if (present(addr) && present(servers_n)) {
      r_.error(servers_n, "upstream '" + u.name + "' has both address and servers (use one)");
    } else if (present(addr)) {
      if (auto ep = r_.parsed<endpoint>(addr, parse_endpoint, "upstream address (want host:port)"))
        u.servers.push_back({*ep, 1, {}});
    } else if (present(servers_n)) {
      servers(servers_n, u);
    } else {
      r_.error(name_n, "upstream '" + u.name + "' needs an address or servers");
    }
    if (auto n = o.get("balance"); present(n)) {
      if (auto s = r_.one_of(n, {"round_robin", "least_conn", "hash"}))
        u.balance = *s == "least_conn" ? balance::least_conn : *s == "hash" ? balance::hash : balance::round_robin;
    }
    if (auto n = o.get("hash_key"); present(n)) {
      if (auto k = key_source_of(r_, n)) u.hash_key = *k;
      if (u.balance != balance::hash) r_.error(n, "hash_key is read with balance: hash only");
    }
    if (auto n = o.get("eject"); present(n)) eject(n, u.eject);
    if (auto n = o.get("health"); present(n)) health(n, u.health);
    if (auto n = o.get("retries"); present(n)) set(u.retries, r_.unsigned_int(n, 0, 5));
    if (auto n = o.get("retry_budget"); present(n)) budget(n, u.budget);
    if (auto n = o.get("connect_timeout"); present(n)) set(u.connect_timeout, positive_duration(r_, n));
    if (auto n = o.get("response_timeout"); present(n)) set(u.response_timeout, positive_duration(r_, n));
    if (auto n = o.get("try_timeout"); present(n)) set(u.try_timeout, positive_duration(r_, n));
    if (auto n = o.get("max_idle"); present(n)) set(u.max_idle, r_.unsigned_int(n, 0, 100000));
    if (auto n = o.get("idle_timeout"); present(n)) set(u.idle_timeout, positive_duration(r_, n));
    if (auto n = o.get("tls"); present(n)) tls(n, u.tls);
    if (auto n = o.get("stream_idle_timeout"); present(n)) set(u.stream_idle_timeout, positive_duration(r_, n));
    if (auto n = o.get("protocol"); present(n))
      if (auto p = r_.one_of(n, {"http1", "h2"})) u.proto = *p == "h2" ? upstream_config::protocol::h2 : upstream_config::protocol::http1;
  }

  void tls(const YAML::Node& node, upstream_tls_config& t) {
    yaml_reader::object o(r_, node, "tls");
    if (!o.ok()) return;
    t.enabled = true;
    t.where = r_.file() + ":" + std::to_string(node.Mark().line + 1);
    if (auto n = o.get("verify"); present(n)) set(t.verify, r_.boolean(n));
    if (auto n = o.get("ca"); present(n)) set(t.ca, file_path(r_, n));
    if (auto n = o.get("server_name"); present(n))
      if (auto v = r_.string(n)) {
        // (sent in the handshake and matched against the certificate: a host name)
        if (!visible(*v, 253, "/:@[]")) r_.error(n, "tls.server_name must be a host name (at most 253 characters)");
        else t.server_name = *v;
      }
    auto cert = o.get("client_cert"), key = o.get("client_key");
    if (present(cert)) set(t.client_cert, file_path(r_, cert));
    if (present(key)) set(t.client_key, file_path(r_, key));
    if (t.client_cert.empty() != t.client_key.empty())
      r_.error(present(cert) ? cert : key, "tls.client_cert and tls.client_key go together (PEM file paths)");
    if (!t.verify && !t.ca.empty()) r_.error(o.get("ca"), "tls.ca is read with verify: true only");
  }

  void servers(const YAML::Node& node, upstream_config& u) {
    if (!node.IsSequence() || node.size() == 0) {
      r_.error(node, "servers must be a list of {address, weight} (at least one)");
      return;
    }
    if (!r_.within(node, caps::servers, "an upstream", "servers")) return;
    for (const auto& item : node) {
      auto s = server(item);
      if (!s) continue;
      if (std::any_of(u.servers.begin(), u.servers.end(), [&](auto& x) { return x.address == s->address; }))
        r_.error(item, "server " + s->address.str() + " is listed twice in upstream '" + u.name + "'");
      else u.servers.push_back(std::move(*s));
    }
  }

  // One item of `servers`: {address, weight}, or the address alone.
  std::optional<upstream_server> server(const YAML::Node& item) {
    const char* hint = "server address (want host:port)";
    upstream_server s;
    if (!item.IsMap()) {
      auto ep = r_.parsed<endpoint>(item, parse_endpoint, hint);
      if (!ep) return std::nullopt;
      s.address = *ep;
      return s;
    }
    yaml_reader::object so(r_, item, "server");
    // (a YAML::Node is never assigned to here: that would write into the document)
    const YAML::Node addr = so.get("address");
    if (!present(addr)) {
      r_.error(item, "a server needs an address");
      return std::nullopt;
    }
    if (auto w = so.get("weight"); present(w)) set(s.weight, r_.unsigned_int(w, 1, 10'000));
    auto ep = r_.parsed<endpoint>(addr, parse_endpoint, hint);
    if (!ep) return std::nullopt;
    s.address = *ep;
    return s;
  }

  void eject(const YAML::Node& node, eject_config& e) {
    yaml_reader::object o(r_, node, "eject");
    if (!o.ok()) return;
    if (auto n = o.get("failures"); present(n)) set(e.failures, r_.unsigned_int(n, 0, 1000));
    if (auto n = o.get("base_time"); present(n)) set(e.base_time, positive_duration(r_, n));
    if (auto n = o.get("max_time"); present(n)) set(e.max_time, positive_duration(r_, n));
    if (auto n = o.get("max_share"); present(n)) set(e.max_share, share(n));
    if (auto n = o.get("statuses"); present(n)) e.statuses = statuses(n, 500, 599, "eject.statuses");
    if (e.max_time < e.base_time) r_.error(node, "eject.max_time is shorter than eject.base_time");
  }

  void health(const YAML::Node& node, health_check_config& h) {
    yaml_reader::object o(r_, node, "health");
    if (!o.ok()) return;
    h.enabled = true;
    if (auto n = o.get("path"); present(n))
      if (auto p = r_.string(n)) {
        // (sent as the request line's target: one token of visible ASCII, from '/')
        if (!visible(*p, 1024) || p->front() != '/')
          r_.error(n, "health.path must be a path from '/' of visible characters (at most 1024)");
        else h.path = *p;
      }
    if (auto n = o.get("host"); present(n))
      if (auto v = r_.string(n)) {
        if (!visible(*v, 255, ","))
          r_.error(n, "health.host must be a host name or host:port (visible characters, at most 255)");
        else h.host = *v;
      }
    if (auto n = o.get("interval"); present(n)) set(h.interval, positive_duration(r_, n));
    if (auto n = o.get("timeout"); present(n)) set(h.timeout, positive_duration(r_, n));
    if (auto n = o.get("rise"); present(n)) set(h.rise, r_.unsigned_int(n, 1, 100));
    if (auto n = o.get("fall"); present(n)) set(h.fall, r_.unsigned_int(n, 1, 100));
    if (auto n = o.get("statuses"); present(n)) h.statuses = statuses(n, 100, 599, "health.statuses");
    if (h.interval < std::chrono::milliseconds(100)) r_.error(node, "health.interval is at least 100ms");
    if (h.timeout > h.interval) r_.error(node, "health.timeout is longer than health.interval");
  }

  void budget(const YAML::Node& node, retry_budget& b) {
    yaml_reader::object o(r_, node, "retry_budget");
    if (!o.ok()) return;
    if (auto n = o.get("share"); present(n)) set(b.share, share(n));
    if (auto n = o.get("min"); present(n)) set(b.min, r_.unsigned_int(n, 0, 10'000));
  }

  // A list of at most 100 statuses, each from lo to hi (`key` names it in the error).
  std::vector<unsigned> statuses(const YAML::Node& n, unsigned lo, unsigned hi, const char* key) {
    std::vector<unsigned> out;
    auto items = r_.list(n, true);
    if (items.size() > 100) r_.error(n, std::string(key) + " has at most 100 items");
    else for (const auto& s : items)
      if (auto code = r_.unsigned_int(s, lo, hi)) out.push_back(static_cast<unsigned>(*code));
    return out;
  }

  // 1 to `max` characters of visible ASCII, none of them in `refused`: what may be
  // written into a request line or a header as it is.
  static bool visible(const std::string& v, std::size_t max, std::string_view refused = {}) {
    return !v.empty() && v.size() <= max && std::none_of(v.begin(), v.end(), [&](unsigned char c) {
      return c <= ' ' || c >= 0x7f || refused.find(static_cast<char>(c)) != std::string_view::npos;
    });
  }

  std::optional<double> share(const YAML::Node& n) {
    return r_.parsed<double>(n, parse_share, "share (want a number from 0 to 1, e.g. 0.5)");
  }

  yaml_reader& r_;
};

}  // namespace

void load_upstreams(yaml_reader& r, const YAML::Node& node, config& c) {
  if (!node.IsMap()) {
    r.error(node, "upstreams must be a mapping of name to upstream");
    return;
  }
  if (!r.within(node, caps::upstreams, "a configuration", "upstreams")) return;
  upstream_loader l(r);
  std::size_t servers = 0;
  for (auto it = node.begin(); it != node.end(); ++it) {
    l.upstream(it->first, it->second, c);
    servers += c.upstreams.back().servers.size();
    if (servers > caps::servers_total) {
      r.error(it->first, "a configuration has at most " + std::to_string(caps::servers_total) +
                             " servers in all its upstreams");
      return;
    }
  }
}

}  // namespace fg::config::detail
