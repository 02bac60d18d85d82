#pragma once
// The files a configuration names besides itself, which every load reads with it: the
// TLS certificates, keys and CA bundles (the listener's and the upstreams'), and the
// consumer files of plans; and what a load says of them.
#include <string>
#include <vector>

#include "config/config.hpp"
#include "limit/consumers.hpp"

namespace fg::app {

// Their paths (watched with the configuration file: a change reloads).
std::vector<std::string> side_files(const config::config& cfg);

// What each consumer file holds, logged at every load.
void log_consumers(const limit::consumer_maps& maps);

// An upstream whose servers' certificates are not checked is said so at every load.
void warn_unverified(const config::config& cfg);

}  // namespace fg::app
