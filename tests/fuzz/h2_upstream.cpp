// A hostile HTTP/2 upstream: the input is what a server writes to the gateway's
// upstream::h2_session (its SETTINGS, heads, DATA, trailers, resets, GOAWAY, floods),
// after which it closes. The gateway's side starts two calls on the session (a POST
// whose body it sends, and a GET), reads each one's head, body and trailers as far as
// they go, and ends. Every wait must end once the server is gone: a hang is a finding
// (libFuzzer's -timeout), as is any sanitizer report, a head or trailers held past their
// bound, or a body held past its stream's window.
//
// Built by the sanitizer build (clang, scripts/build.sh asan) with h2_session.cpp
// compiled into it, so that libFuzzer's coverage guides it through the session's code.
#include "upstream/h2_session.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

struct world {
  asio::io_context ioc;
  tcp::acceptor server{ioc, {asio::ip::address_v4::loopback(), 0}};
};

// The server: writes the input, closes its side, then reads (and drops) what the
// gateway sent until the gateway closes.
asio::awaitable<void> serve(tcp::socket s, std::string input) {
  co_await asio::async_write(s, asio::buffer(input), use_tuple);
  boost::system::error_code ignored;
  s.shutdown(tcp::socket::shutdown_send, ignored);
  char sink[16384];
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(sink), use_tuple);
    if (ec) co_return;
  }
}

nghttp2_nv nv(std::string_view n, std::string_view v) {
  return {reinterpret_cast<std::uint8_t*>(const_cast<char*>(n.data())),
          reinterpret_cast<std::uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(), NGHTTP2_NV_FLAG_NONE};
}

// One call through to its end, whatever the server made of it.
asio::awaitable<void> call(std::shared_ptr<fg::upstream::h2_session> s, bool post) {
  fg::deadline::entry watch;
  fg::upstream::h2_call c;
  const nghttp2_nv fields[] = {nv(":method", post ? "POST" : "GET"), nv(":scheme", "http"),
                               nv(":authority", "fuzz"), nv(":path", "/x"), nv("te", "trailers")};
  if (!c.start(s, fields, post, watch, watch)) co_return;
  static const std::string body(100'000, 'b');  // (more than a stream's first window)
  if (post && co_await c.send(body.data(), body.size(), true)) co_return;
  if (co_await c.head()) co_return;
  if (c.fields().size() * 32 > fg::upstream::h2_limits_up::max_head_bytes) std::abort();
  char buf[16384];
  std::size_t n = 0, total = 0;
  while (!c.done()) {
    if (co_await c.read(buf, sizeof buf, n)) break;
    total += n;
  }
  (void)total;
  std::size_t trailer_bytes = 0;
  for (const auto& [k, v] : c.trailers()) trailer_bytes += k.size() + v.size() + 32;
  if (trailer_bytes > fg::upstream::h2_limits_up::max_head_bytes) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static world& w = *new world;
  w.ioc.restart();  // (the last input's poll found no work left: that stopped it)
  auto conn = std::make_unique<fg::upstream::connection>(w.ioc.get_executor());
  tcp::socket theirs(w.ioc);
  boost::system::error_code ec;
  do conn->socket.connect(w.server.local_endpoint(), ec);
  while (ec == asio::error::interrupted);
  if (ec == asio::error::already_connected) ec = {};
  do w.server.accept(theirs, ec);
  while (ec == asio::error::interrupted);
  if (ec) throw boost::system::system_error(ec, "the loopback connection");
  auto session = std::make_shared<fg::upstream::h2_session>(std::move(conn));
  session->start();
  int done = 0;
  auto count = [&](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
    ++done;
  };
  asio::co_spawn(w.ioc, serve(std::move(theirs), std::string(reinterpret_cast<const char*>(data), size)), count);
  asio::co_spawn(w.ioc, call(session, true), count);
  asio::co_spawn(w.ioc, call(session, false), count);
  // The calls end (the server's close ends their waits); then the session is let go.
  while (done < 2) w.ioc.run_one();
  session->close();
  session.reset();
  while (done < 3) w.ioc.run_one();
  w.ioc.poll();
  return 0;
}
