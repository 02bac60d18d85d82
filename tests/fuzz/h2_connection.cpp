// A client's bytes to an HTTP/2 connection, after the preface: serve_h2 on a loopback TCP
// connection whose client writes the input and then closes its side, through the
// gateway's routes, limits (a decision source that admits) and exchanges to an upstream
// on loopback that answers every request. The connection must end once the client's
// side has ended and everything it started is done: a hang is a finding (libFuzzer's
// -timeout), as is any sanitizer report or an exception out of the connection.
//
// Built by the sanitizer build (clang, scripts/build.sh asan), not by this folder's own
// project: it runs the whole request path, whose libraries that build has. The HTTP/2
// code and the exchange are templates instantiated here, so they carry libFuzzer's
// coverage; the rest (routing, the pool) is the libraries' and does not guide it.
#include "http/h2_connection.ipp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>

#include "../unit/fake_source.hpp"
#include "config/loader.hpp"
#include "upstream/pool.hpp"

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

const char* const config_text = R"(http2:
  cleartext: true
  max_concurrent_streams: 8
upstreams:
  api:
    address: "127.0.0.1:__PORT__"
    response_timeout: 5s
routes:
  - name: all
    match:
      path_prefix: /
    upstream: api
    limits:
      - {name: held, algorithm: concurrency, key: ip, limit: 100}
      - {name: gate, algorithm: fixed_window, key: header:x-client, limit: 100, window: 1m, cost: body_bytes}
)";

struct world {
  fg::test::fake_source source;
  fg::http::limits_in_use limits{&source, 0};
  fg::http::connection_limit conns;
  fg::http::worker_context ctx;
  asio::io_context ioc;
  fg::upstream::pool pool{ioc.get_executor()};
  tcp::acceptor upstream{ioc, {asio::ip::address_v4::loopback(), 0}};
  tcp::acceptor front{ioc, {asio::ip::address_v4::loopback(), 0}};

  world() {
    source.remote = false;
    std::string text = config_text;
    text.replace(text.find("__PORT__"), 8, std::to_string(upstream.local_endpoint().port()));
    auto loaded = fg::config::load_string(text, "fuzz.yaml");
    if (!loaded.errors.empty()) {
      std::cerr << loaded.errors.front().str() << "\n";
      std::abort();
    }
    ctx.rt = fg::http::compiled_config::build(loaded.cfg);
    pool.configure(loaded.cfg->upstreams);
    ctx.pool = &pool;
    ctx.limits = &limits;
    ctx.connections = &conns;
    conns.max = 1000;
    asio::co_spawn(ioc, accept_upstream(), asio::detached);
  }

  asio::awaitable<void> accept_upstream() {
    for (;;) {
      auto [ec, s] = co_await upstream.async_accept(asio::as_tuple(asio::use_awaitable));
      if (ec) co_return;
      asio::co_spawn(ioc, serve_upstream(std::move(s)), asio::detached);
    }
  }

  // Answers each request head with a short body, whatever the request's body (it reads
  // on, so that an upload is taken in).
  static asio::awaitable<void> serve_upstream(tcp::socket s) {
    namespace bhttp = boost::beast::http;
    boost::beast::flat_buffer b;
    for (;;) {
      bhttp::request<bhttp::string_body> req;
      auto [ec, n] = co_await bhttp::async_read(s, b, req, asio::as_tuple(asio::use_awaitable));
      if (ec) co_return;
      static constexpr std::string_view answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: b\r\n\r\nok";
      auto [wec, w] = co_await asio::async_write(s, asio::buffer(answer), asio::as_tuple(asio::use_awaitable));
      if (wec) co_return;
    }
  }
};

// Writes the input, ends its side, and reads what the gateway writes until it closes.
asio::awaitable<void> client(tcp::socket s, std::string input) {
  co_await asio::async_write(s, asio::buffer(input), asio::as_tuple(asio::use_awaitable));
  boost::system::error_code ignored;
  s.shutdown(tcp::socket::shutdown_send, ignored);
  char sink[16384];
  for (;;) {
    auto [rec, got] = co_await s.async_read_some(asio::buffer(sink), asio::as_tuple(asio::use_awaitable));
    if (rec) co_return;
  }
}

void rethrow(std::exception_ptr e) {
  if (e) std::rethrow_exception(e);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static world& w = *new world;  // (once: its upstream connections are pooled across inputs)
  tcp::socket to(w.ioc), from(w.ioc);
  // (libFuzzer's timer signal interrupts a blocking call: it is tried again)
  boost::system::error_code ec;
  do to.connect(w.front.local_endpoint(), ec);
  while (ec == boost::asio::error::interrupted);
  if (ec == boost::asio::error::already_connected) ec = {};  // (interrupted, yet done meanwhile)
  do w.front.accept(from, ec);
  while (ec == boost::asio::error::interrupted);
  if (ec) throw boost::system::system_error(ec, "the loopback connection");
  auto slot = fg::http::connection_slot::take(&w.conns);
  const auto peer = from.remote_endpoint().address();
  bool served = false, read = false;
  asio::co_spawn(w.ioc, client(std::move(to), std::string(reinterpret_cast<const char*>(data), size)),
                 [&](std::exception_ptr e) { rethrow(e), read = true; });
  asio::co_spawn(w.ioc,
                 fg::http::detail::serve_h2(w.ctx, std::move(from), std::move(*slot), peer,
                                            std::string(fg::http::detail::h2_preface), {}),
                 [&](std::exception_ptr e) { rethrow(e), served = true; });
  while (!(served && read)) w.ioc.run_one();
  if (w.conns.open.load() != 0) std::abort();  // the connection's place given back
  return 0;
}
