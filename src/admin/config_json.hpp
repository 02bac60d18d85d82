#pragma once
#include <boost/json/object.hpp>

#include "config/config.hpp"

namespace fg::admin {

// Stands for a secret's value in /config (an empty secret shows as "").
inline constexpr const char* redacted = "<redacted>";

// The effective configuration as JSON, for /config: durations in milliseconds (keys
// ending in _ms), secrets (redis.password) replaced by `redacted`.
boost::json::object config_to_json(const config::config& cfg);

// As the configuration writes them: "sliding_log"; "global", "ip", "header:NAME", ...
const char* algorithm_name(config::algorithm a);
std::string key_text(const config::key_source& k);
const char* balance_name(config::balance b);

}  // namespace fg::admin
