#pragma once
// Precompiled for the core library: Asio and Beast dominate compile time on 2 cores.
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>
#include <string>
#include <string_view>
#include <vector>
#include <memory>
#include <optional>
#include <chrono>
