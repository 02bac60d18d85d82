#pragma once
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <thread>

#include "admin/status.hpp"
#include "config/config.hpp"
#include "limit/inspector.hpp"

namespace fg::admin {

// The admin listener's own bounds: a scraper gets little and waits not long.
struct listener_limits {
  unsigned max_connections = 32;           // past it, a new connection is closed at once
  std::size_t max_head_bytes = 8 * 1024;   // 431 above it
  std::chrono::milliseconds read_timeout{5'000};  // for a request's head, and a response's write
  std::chrono::milliseconds idle_timeout{10'000}; // between requests of a keep-alive connection
};

// HTTP/1.1 on admin.listen, on a thread and io_context of its own (never a worker's),
// answering from `status` only (admin/routes.hpp has the paths).
class listener {
 public:
  explicit listener(status_source& status, listener_limits limits = {});
  ~listener();
  listener(const listener&) = delete;
  listener& operator=(const listener&) = delete;

  // Binds and listens (before any thread runs), or says why it cannot.
  boost::system::error_code listen(const config::endpoint& ep);
  // The admin's io_context, for what serves on its thread (the inspector's connection).
  boost::asio::any_io_executor executor() { return ioc_.get_executor(); }
  // What /limits reads the store through (before start(); without one it answers 503).
  void set_inspector(std::unique_ptr<limit::inspector> inspector) { inspector_ = std::move(inspector); }
  // Serves on a thread of its own.
  void start();
  // Thread-safe. Stops serving and closes every admin connection; joins the thread.
  void stop();

 private:
  boost::asio::awaitable<void> accept_loop();
  boost::asio::awaitable<void> session(boost::asio::ip::tcp::socket socket);

  status_source& status_;
  const listener_limits limits_;
  // Open admin connections; touched on the admin thread only. Declared before the
  // io_context, whose destruction ends suspended sessions (which count themselves out).
  unsigned open_ = 0;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  // Its connection lives on ioc_: destroyed before it, after the thread is joined.
  std::unique_ptr<limit::inspector> inspector_;
  std::thread thread_;
};

}  // namespace fg::admin
