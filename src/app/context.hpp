#pragma once
#include <boost/asio/ip/tcp.hpp>

#include <list>
#include <memory>

#include "app/runtime.hpp"

namespace fg::upstream { class pool; }
namespace fg::obs { class access_log; }

namespace fg::app {

// A live downstream connection, as the worker sees it (for drain).
struct session_entry {
  boost::asio::ip::tcp::socket* socket = nullptr;
  bool idle = true;  // waiting for a request with nothing buffered: safe to close on drain
};

// What a session needs from the worker that owns it. Lives on the worker's thread.
struct worker_context {
  std::shared_ptr<const runtime> rt;
  upstream::pool* pool = nullptr;
  std::shared_ptr<obs::access_log> access;
  std::list<session_entry> sessions;
  bool draining = false;
  unsigned id = 0;
};

}  // namespace fg::app
