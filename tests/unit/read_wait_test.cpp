#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include "net/read_wait.hpp"

// net::read_waits_for_input over a real loopback connection: a read started after it
// makes no attempt on the spot, and still gets input that arrives later, whether that
// input's edge is handled while the read waits or before the read is started.
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using fg::net::read_tries_first;
using fg::net::read_waits_for_input;

struct connected {
  asio::io_context io;
  tcp::socket client{io}, server{io};
  connected() {
    tcp::acceptor acc(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    client.connect(acc.local_endpoint());
    acc.accept(server);
  }
};

// Reads once from `s`, running `io` until the read completes (or 10 s pass).
std::string read_once(asio::io_context& io, tcp::socket& s) {
  char buf[64];
  std::string got = "(no completion)";
  s.async_read_some(asio::buffer(buf), [&](boost::system::error_code ec, std::size_t n) {
    got = ec == asio::error::eof ? "(end)" : ec ? "error: " + ec.message() : std::string(buf, n);
  });
  io.restart();
  io.run_for(std::chrono::seconds(10));
  return got;
}

}  // namespace

TEST_CASE("read_wait: a read waiting for input gets what arrives after it started", "[net]") {
  connected c;
  REQUIRE(read_tries_first(c.client));  // (a new socket's reads are tried on the spot)
  read_waits_for_input(c.client);
  if (read_tries_first(c.client)) {
    WARN("this Boost's reactor is not the one read_wait knows: nothing to test");
    return;
  }
  char buf[64];
  std::string got;
  c.client.async_read_some(asio::buffer(buf), [&](boost::system::error_code ec, std::size_t n) {
    got = ec ? "error: " + ec.message() : std::string(buf, n);
  });
  c.io.poll();  // the read waits: nothing came
  CHECK(got.empty());
  asio::write(c.server, asio::buffer(std::string_view("answer")));
  c.io.restart();
  c.io.run_for(std::chrono::seconds(10));
  CHECK(got == "answer");
  CHECK(read_tries_first(c.client));  // the edge that brought it turned trying on again
}

TEST_CASE("read_wait: input whose edge was handled before the read started is still read", "[net]") {
  connected c;
  read_waits_for_input(c.client);
  if (read_tries_first(c.client)) return;  // (see above)
  // The answer arrives while no read waits; a turn of the loop sees its edge with nothing
  // to hand it to. That turn makes the next read try on the spot again, so it is not lost.
  asio::write(c.server, asio::buffer(std::string_view("early")));
  auto work = asio::make_work_guard(c.io);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!read_tries_first(c.client) && std::chrono::steady_clock::now() < until) {
    c.io.restart();
    c.io.run_for(std::chrono::milliseconds(10));
  }
  REQUIRE(read_tries_first(c.client));
  work.reset();
  CHECK(read_once(c.io, c.client) == "early");
}

TEST_CASE("read_wait: the end of the connection reaches a waiting read", "[net]") {
  connected c;
  read_waits_for_input(c.client);
  c.server.shutdown(tcp::socket::shutdown_send);
  CHECK(read_once(c.io, c.client) == "(end)");
}
