#pragma once
// The proxy's listening sockets for one address: one per worker, in one SO_REUSEPORT
// group, so that the kernel hands each new connection to one worker's socket. One
// socket shared by every worker (each waiting on it in its own epoll set) woke every
// worker for each connection, and all but one found nothing to accept (nginx avoids it
// with EPOLLEXCLUSIVE, Envoy and HAProxy with reuse_port, as here).
//
// A group only this process can join: listen() first checks, with a socket outside the
// group, that no other process listens on the address (a second gateway started on
// the same port fails as it did with one socket, instead of sharing its connections).
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <string>
#include <vector>

#include "config/config.hpp"

namespace fg::app {

class listen_group {
 public:
  // The sockets are registered with `ioc`'s reactor: a context that never runs (the
  // workers accept on copies of their own, in theirs).
  explicit listen_group(boost::asio::io_context& ioc) : ioc_(ioc) {}

  // `n` sockets bound to `at` (every one to the port the first got, where `at` asks for
  // any); false, logged with `what` ("listen", "tls.listen"), when they cannot be.
  bool bind(const config::endpoint& at, unsigned n, const std::string& what);
  // Listens on every socket; an error (the address in use by another process) listens
  // on none.
  boost::system::error_code listen();
  void close();
  // Worker i's socket.
  int fd(unsigned i) { return sockets_[i % sockets_.size()].native_handle(); }

 private:
  boost::asio::io_context& ioc_;
  boost::asio::ip::tcp::endpoint at_;
  std::vector<boost::asio::ip::tcp::acceptor> sockets_;
};

}  // namespace fg::app
