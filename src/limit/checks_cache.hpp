#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace fg::limit {

// One connection's last checks (limit_call::checks), kept for its client's next request:
// where a route's checks follow the client alone (checks_follow_client), the next
// request on the same route, from the same client, under the same configuration, is
// decided with them instead of building its keys again. The configuration they were
// built under is held, so that no later one can take the route's address. Owned by
// whatever serves the connection's requests, one request at a time.
class checks_cache {
 public:
  // Whether the checks kept serve a request of `client` on `route` under `config`.
  bool serves(const config::route_config& route, const void* config, std::string_view client) const {
    return route_ == &route && config_.get() == config && client_ == client;
  }
  // The checks just built for `client` on `route`, under `config`, serve the next
  // request when `reusable`; else nothing is kept.
  template <class Config>
  void keep(bool reusable, const config::route_config& route, const std::shared_ptr<Config>& config,
            std::string_view client) {
    route_ = reusable ? &route : nullptr;
    if (!reusable) return;  // (no copy of the configuration's pointer then)
    config_ = config;
    client_ = client;
  }
  // The checks were cleared or replaced by another request's: none kept.
  void forget() { route_ = nullptr; }
  // An idle connection keeps no capacity (and holds no configuration).
  void release_memory() {
    route_ = nullptr;
    config_.reset();
    std::string().swap(client_);
  }

 private:
  const config::route_config* route_ = nullptr;
  std::shared_ptr<const void> config_;
  std::string client_;  // the client they were built for
};

}  // namespace fg::limit
