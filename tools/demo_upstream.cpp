// A small HTTP/1.1 origin for the quick start: answers every request with what it
// received, so `curl` through floodgate shows the forwarded headers.
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <iostream>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

asio::awaitable<void> serve(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request<http::string_body> req;
    stream.expires_after(std::chrono::seconds(60));
    auto [ec, n] = co_await http::async_read(stream, buffer, req, use_tuple);
    if (ec) co_return;
    std::string body = "hello from the demo upstream\n";
    body += std::string(req.method_string()) + " " + std::string(req.target()) + "\n";
    for (const auto& f : req) body += std::string(f.name_string()) + ": " + std::string(f.value()) + "\n";
    http::response<http::string_body> res{http::status::ok, req.version()};
    res.set(http::field::content_type, "text/plain");
    res.keep_alive(req.keep_alive());
    res.body() = std::move(body);
    res.prepare_payload();
    auto [wec, wn] = co_await http::async_write(stream, res, use_tuple);
    if (wec || !req.keep_alive()) co_return;
  }
}

asio::awaitable<void> listen(tcp::acceptor& acceptor) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(use_tuple);
    if (ec) continue;
    asio::co_spawn(acceptor.get_executor(), serve(std::move(socket)), asio::detached);
  }
}

int main(int argc, char** argv) {
  std::string port = argc > 1 ? argv[1] : "9000";
  asio::io_context ioc{1};
  tcp::acceptor acceptor(ioc, {asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(std::stoi(port))});
  std::cout << "demo upstream listening on 127.0.0.1:" << port << std::endl;
  asio::co_spawn(ioc, listen(acceptor), asio::detached);
  asio::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](auto, int) { ioc.stop(); });
  ioc.run();
}
