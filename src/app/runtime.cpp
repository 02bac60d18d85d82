#include "app/runtime.hpp"

namespace fg::app {

std::shared_ptr<const runtime> runtime::build(config::snapshot cfg) {
  auto rt = std::make_shared<runtime>();
  rt->routes = routing::route_table(cfg->routes);
  net::cidr_set trusted;
  for (const auto& c : cfg->client_ip.trusted_proxies)
    if (auto parsed = net::parse_cidr(c)) trusted.add(*parsed);
  rt->client_ip = net::client_ip_resolver(std::move(trusted), cfg->client_ip.headers,
                                          static_cast<unsigned>(cfg->client_ip.ipv6_prefix));
  rt->cfg = std::move(cfg);
  return rt;
}

}  // namespace fg::app
