#pragma once
#include <memory>
#include <vector>

#include "http/runtime.hpp"
#include "app/worker.hpp"

namespace fg::app {

// http.max_connections, or (0) what the descriptor limit allows, after raising the soft
// limit to the hard one.
std::size_t max_connections(const config::config& cfg, unsigned workers);

// The listening socket and N workers; runs until SIGTERM/SIGINT, then drains.
class server {
 public:
  explicit server(std::shared_ptr<const http::runtime> rt);
  // Blocks until a stop signal and the drain are done. Returns the exit code.
  int run();

 private:
  std::shared_ptr<const http::runtime> rt_;
};

}  // namespace fg::app
