#include "redis/topology.hpp"

namespace fg::redis {

std::vector<config::endpoint> standalone::seeds() const {
  if (addresses_.empty()) return {};
  return {addresses_.front()};
}

std::unique_ptr<topology> make_topology(const config::redis_config& cfg) {
  return std::make_unique<standalone>(cfg.addresses);
}

}  // namespace fg::redis
