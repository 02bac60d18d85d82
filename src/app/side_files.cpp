#include "app/side_files.hpp"

#include <spdlog/spdlog.h>

namespace fg::app {

// The files besides the configuration that a reload reads: the TLS certificates, keys
// and CA bundles, the listener's and the upstreams', and the consumer files of plans.
std::vector<std::string> side_files(const config::config& cfg) {
  std::vector<std::string> out;
  auto add = [&](const std::string& f) {
    if (!f.empty()) out.push_back(f);
  };
  if (cfg.tls.listen) {
    for (const auto& c : cfg.tls.certificates) {
      add(c.cert);
      add(c.key);
    }
    add(cfg.tls.client_ca);
  }
  for (const auto& u : cfg.upstreams)
    if (u.tls.enabled) {
      add(u.tls.ca);
      add(u.tls.client_cert);
      add(u.tls.client_key);
    }
  for (const auto& f : limit::consumer_files(cfg)) add(f);
  return out;
}

// What each consumer file holds, at every load.
void log_consumers(const limit::consumer_maps& maps) {
  for (const auto& [path, map] : maps.by_path)
    spdlog::info("consumer file {}: {} consumer(s), {} plan name(s), read in {} ms", path, map->size(),
                 map->plans().size(), map->load_ms());
}

// An upstream whose servers' certificates are not checked is said so at every load.
void warn_unverified(const config::config& cfg) {
  for (const auto& u : cfg.upstreams)
    if (u.tls.enabled && !u.tls.verify)
      spdlog::warn("upstream {}: tls.verify is false: its servers' certificates are not checked (anyone on the path "
                   "can pose as them)", u.name);
}

}  // namespace fg::app
