#pragma once
#include <boost/json/object.hpp>

#include <chrono>

#include "upstream/servers.hpp"

namespace fg::admin {

// GET /upstreams: every upstream's servers as the workers share them — weight, state
// (up or ejected, and for how much longer), failures in a row, requests in flight, the
// counters, and what ejected it last.
boost::json::object upstreams_to_json(const upstream::server_set& set, std::chrono::steady_clock::time_point now);

}  // namespace fg::admin
