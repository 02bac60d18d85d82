#pragma once
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "net/client_ip.hpp"
#include "http/tls.hpp"
#include "limit/consumers.hpp"
#include "routing/route_table.hpp"
#include "upstream/dns.hpp"
#include "upstream/servers.hpp"

namespace fg::http {

// Everything derived from one configuration snapshot. Immutable once built; a
// request holds it from start to end, a reload swaps it.
struct compiled_config {
  config::snapshot cfg;
  routing::route_table routes;
  net::client_ip_resolver client_ip;
  // Not forwarded from a peer that is no trusted proxy: the identity fields, and the
  // other forwarding claims that frameworks behind the gateway believe (Spring's
  // ForwardedHeaderFilter, Tomcat's RemoteIpValve) or that name a client.
  std::vector<std::string> untrusted_drop;
  // Names the gateway reads or sets: a request field that names one of them with '_'
  // for '-' ("Content_Length", "X_Forwarded_For") is refused, since backends that fold
  // '_' into '-' would read it as that header (nginx's underscores_in_headers off).
  std::vector<std::string> interpreted;
  // Per upstream (by index): the Host given to a request that has none.
  std::vector<std::string> upstream_hosts;

  // cfg->upstreams as the requests see them: each server given by name replaced by a
  // server per address the name resolved to (upstream::expand), by index as cfg's.
  std::vector<config::upstream_config> upstreams;
  // Every upstream's servers and their health, shared by the workers (kept from
  // `previous` for the servers a reload keeps).
  std::shared_ptr<const upstream::server_set> servers;

  // The TLS listener's certificates and the upstreams' client sides, read when the
  // configuration was.
  tls_contexts tls;
  // The consumer files of limits with plans, read when the configuration was.
  limit::consumer_maps consumers;

  // `answers`: the addresses of the servers' names (none: a named server has none).
  static std::shared_ptr<const compiled_config> build(config::snapshot cfg, const compiled_config* previous = nullptr,
                                                      const upstream::dns_answers& answers = {},
                                                      tls_contexts tls = {}, limit::consumer_maps consumers = {});
};

}  // namespace fg::http
