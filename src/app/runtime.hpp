#pragma once
#include <memory>

#include "config/config.hpp"
#include "net/client_ip.hpp"
#include "routing/route_table.hpp"

namespace fg::app {

// Everything derived from one configuration snapshot. Immutable once built; a
// request holds it from start to end, a reload swaps it.
struct runtime {
  config::snapshot cfg;
  routing::route_table routes;
  net::client_ip_resolver client_ip;

  static std::shared_ptr<const runtime> build(config::snapshot cfg);
};

}  // namespace fg::app
