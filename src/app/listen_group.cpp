#include "app/listen_group.hpp"

#include <boost/asio/socket_base.hpp>
#include <spdlog/spdlog.h>

#include <sys/socket.h>

#include <algorithm>

namespace fg::app {

namespace {
using tcp = boost::asio::ip::tcp;
using reuse_port = boost::asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;
}  // namespace

bool listen_group::bind(const config::endpoint& at, unsigned n, const std::string& what) {
  try {
    tcp::resolver resolver(ioc_);
    auto results = resolver.resolve(at.host, std::to_string(at.port), tcp::resolver::passive);
    at_ = results.begin()->endpoint();
    for (unsigned i = 0; i < std::max(1u, n); ++i) {
      auto& s = sockets_.emplace_back(ioc_);
      s.open(at_.protocol());
      s.set_option(tcp::acceptor::reuse_address(true));
      s.set_option(reuse_port(true));
      s.bind(at_);
      if (i == 0) at_ = s.local_endpoint();  // (any port asked for: the others join the first's)
      s.non_blocking(true);
    }
  } catch (const std::exception& e) {
    spdlog::error("cannot listen on {}{}: {}", what == "listen" ? "" : what + " ", at.str(), e.what());
    sockets_.clear();
    return false;
  }
  return true;
}

boost::system::error_code listen_group::listen() {
  boost::system::error_code ec;
  {
    // Another process listening on the address refuses this socket (SO_REUSEADDR alone
    // never shares a listening address; the group's own sockets do not listen yet).
    tcp::acceptor probe(ioc_);
    probe.open(at_.protocol(), ec);
    if (!ec) probe.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) probe.bind(at_, ec);
    if (!ec) probe.listen(1, ec);
    if (ec) return ec;
  }
  for (auto& s : sockets_) {
    s.listen(boost::asio::socket_base::max_listen_connections, ec);
    if (ec) {
      close();
      return ec;
    }
  }
  return ec;
}

void listen_group::close() {
  boost::system::error_code ignored;
  for (auto& s : sockets_) s.close(ignored);
}

}  // namespace fg::app
