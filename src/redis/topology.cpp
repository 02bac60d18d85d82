#include "redis/topology.hpp"

#include "redis/sentinel.hpp"

namespace fg::redis {

std::vector<config::endpoint> standalone::seeds() const {
  if (addresses_.empty()) return {};
  return {addresses_.front()};
}

std::unique_ptr<topology> make_topology(boost::asio::any_io_executor ex, const config::redis_config& cfg) {
  if (cfg.mode == config::redis_mode::sentinel) return std::make_unique<sentinel>(std::move(ex), cfg);
  return std::make_unique<standalone>(cfg.addresses);
}

}  // namespace fg::redis
