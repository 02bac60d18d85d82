#include "http/compiled_config.hpp"

#include <algorithm>

#include "util/text.hpp"

namespace fg::http {

std::shared_ptr<const compiled_config> compiled_config::build(config::snapshot cfg, const compiled_config* previous,
                                                              const upstream::dns_answers& answers,
                                                              tls_contexts tls, limit::consumer_maps consumers) {
  auto rt = std::make_shared<compiled_config>();
  for (const auto& r : cfg->routes) {
    const bool prefix = r.match.path.empty();
    rt->routes.add(r.match.host, r.match.methods, prefix ? r.match.path_prefix : r.match.path, prefix);
  }
  net::cidr_set trusted;
  for (const auto& c : cfg->client_ip.trusted_proxies)
    if (auto parsed = net::parse_cidr(c)) trusted.add(*parsed);
  rt->client_ip = net::client_ip_resolver(std::move(trusted), cfg->client_ip.headers,
                                          static_cast<unsigned>(cfg->client_ip.ipv6_prefix));
  const auto& ci = cfg->client_ip;
  const auto& identity_fields = rt->client_ip.identity_fields();
  rt->untrusted_drop = identity_fields;
  for (const char* h : {"X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Ssl", "X-Forwarded-Scheme",
                        "X-Forwarded-Server", "X-Forwarded-By", "X-Original-Forwarded-For", "X-Client-IP",
                        "True-Client-IP", "CF-Connecting-IP", "Fastly-Client-IP", "X-Cluster-Client-IP"})
    if (std::none_of(rt->untrusted_drop.begin(), rt->untrusted_drop.end(),
                     [&](const auto& x) { return util::iequals_folded(x, h); }))
      rt->untrusted_drop.emplace_back(h);
  rt->interpreted = {"Host", "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "TE", "Trailer",
                     "Keep-Alive", "Proxy-Connection", "Expect", "X-Forwarded-Proto", "X-Forwarded-Host",
                     "X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Ssl", "X-Request-Id", "Cookie",
                     "HTTP2-Settings"};
  for (const auto& h : identity_fields) rt->interpreted.push_back(h);
  if (!ci.forward.empty()) rt->interpreted.push_back(ci.forward);
  for (const auto& r : cfg->routes)
    for (const auto& l : r.limits)
      for (const auto& k : l.key)
        if (k.type == config::key_source::kind::header) rt->interpreted.push_back(k.name);
  for (const auto& u : cfg->upstreams) {
    if (u.balance == config::balance::hash && u.hash_key.type == config::key_source::kind::header)
      rt->interpreted.push_back(u.hash_key.name);
    // With several servers, the first's: a request without Host is HTTP/1.0's, and rare.
    rt->upstream_hosts.push_back(u.servers.empty() ? std::string() : u.servers.front().address.str());
  }
  rt->upstreams = upstream::expand(cfg->upstreams, answers);
  rt->servers = upstream::server_set::build(rt->upstreams, previous ? previous->servers.get() : nullptr, tls.upstreams);
  rt->tls = std::move(tls);
  rt->consumers = std::move(consumers);
  rt->cfg = std::move(cfg);
  return rt;
}

}  // namespace fg::http
