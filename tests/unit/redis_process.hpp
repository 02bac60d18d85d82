#pragma once
// A real redis-server on a free loopback port, for the life of the object (unit tests
// tagged [redis] that need a server, not a fake).
#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

namespace fg::test {

struct redis_process {
  pid_t pid = -1;
  std::uint16_t port = 0;
  redis_process() {
    namespace asio = boost::asio;
    {
      asio::io_context ioc;
      asio::ip::tcp::acceptor a(ioc, {asio::ip::make_address("127.0.0.1"), 0});
      port = a.local_endpoint().port();
    }
    pid = ::fork();
    if (pid == 0) {
      auto p = std::to_string(port);
      ::execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--loglevel", "warning", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Ready when it accepts a connection (polled, with a deadline).
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      asio::io_context ioc;
      asio::ip::tcp::socket s(ioc);
      boost::system::error_code ec;
      s.connect({asio::ip::make_address("127.0.0.1"), port}, ec);
      if (!ec) break;
      if (std::chrono::steady_clock::now() > until) FAIL("redis-server did not start");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~redis_process() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
  }
  redis_process(const redis_process&) = delete;
  redis_process& operator=(const redis_process&) = delete;
};

}  // namespace fg::test
