#pragma once
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>

#include <chrono>
#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>

#include "admin/call_budget.hpp"
#include "admin/routes.hpp"
#include "admin/status.hpp"
#include "config/config.hpp"
#include "store/inspector.hpp"

namespace fg::admin {

// The admin listener's own bounds: a scraper gets little and waits not long. Past a
// connection cap, the connection that has been idle longest (no request in progress:
// waiting for one, or for the rest of its head) is closed to make room, the same
// peer's first: a flood of idle sockets cannot keep the probes out.
struct listener_limits {
  unsigned max_connections = 128;          // in all
  unsigned max_per_peer = 16;              // from one address
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
  void set_inspector(std::unique_ptr<store::inspector> inspector) { inspector_ = std::move(inspector); }
  // Serves on a thread of its own.
  void start();
  // Thread-safe. Stops serving and closes every admin connection; joins the thread.
  void stop();
  // Connections closed to make room, and refused, so far (the admin thread's counts).
  std::uint64_t evicted() const { return evicted_; }

 private:
  // One open connection, as the caps see it.
  struct conn {
    std::string peer;
    boost::beast::tcp_stream* stream = nullptr;
    std::chrono::steady_clock::time_point since;  // in its current state since
    bool busy = false;     // a request read and not yet answered
    bool reading = false;  // bytes of a request arrived, its head not yet whole
    bool gone = false;     // closed to make room: no longer counted
  };
  using conn_list = std::list<conn>;
  struct registration;

  boost::asio::awaitable<void> accept_loop();
  boost::asio::awaitable<void> session(boost::asio::ip::tcp::socket socket, std::string peer);
  // Room for one more connection from `peer`, closing the longest idle one if it must.
  bool make_room(const std::string& peer);
  // Closes one connection to make room (of `peer` only, if given): one that has sent
  // nothing since it connected or since its last answer first, then one still sending
  // its request (a probe's is read at once), the longest in that state first; never
  // one being answered.
  bool evict(const std::string* peer);
  bool evict(const std::string* peer, bool reading);
  void forget(conn_list::iterator it);
  // The answer to one request read by `parser`, with the access rules applied.
  boost::asio::awaitable<reply> answer(const boost::beast::http::request<boost::beast::http::empty_body>& req,
                                       const std::string& peer);

  status_source& status_;
  const listener_limits limits_;
  // Open admin connections; touched on the admin thread only. Declared before the
  // io_context, whose destruction ends suspended sessions (which count themselves out).
  conn_list conns_;
  unsigned open_ = 0;
  std::unordered_map<std::string, unsigned> per_peer_;
  std::uint64_t evicted_ = 0, refused_ = 0;
  call_budget limits_budget_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  // Its connection lives on ioc_: destroyed before it, after the thread is joined.
  std::unique_ptr<store::inspector> inspector_;
  std::thread thread_;
};

}  // namespace fg::admin
