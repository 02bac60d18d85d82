#pragma once
#include <chrono>
#include <optional>
#include <string_view>

#include "config/config.hpp"

namespace fg::config {

// "250ms", "5s", "1m", "1h" (a positive integer and a unit).
std::optional<duration> parse_duration(std::string_view text);
// "10/s", "600/m", "1000/h".
std::optional<rate> parse_rate(std::string_view text);
// "1.2.3.4:80", "[::1]:80", "localhost:80".
std::optional<endpoint> parse_endpoint(std::string_view text);
// A byte size: "16384", "16k", "1m", "1g".
std::optional<std::uint64_t> parse_size(std::string_view text);

}  // namespace fg::config
