#include "admin/listener.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <spdlog/spdlog.h>

#include "admin/routes.hpp"

namespace fg::admin {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// Decrements the open-connection count when a session ends (or its frame is destroyed).
struct counted {
  unsigned& open;
  explicit counted(unsigned& o) : open(o) { ++open; }
  ~counted() { --open; }
  counted(const counted&) = delete;
  counted& operator=(const counted&) = delete;
};

http::response<http::string_body> make_response(reply r, bool head, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
  res.set(http::field::content_type, r.content_type);
  res.set(http::field::cache_control, "no-store");
  if (!r.allow.empty()) res.set(http::field::allow, r.allow);
  res.keep_alive(keep_alive);
  res.body() = std::move(r.body);
  res.prepare_payload();
  // HEAD: the same head (Content-Length included), no body.
  if (head) res.body().clear();
  return res;
}

// A coroutine's completion: an exception that ended it is logged with `what`.
auto logged(const char* what, spdlog::level::level_enum level) {
  return [what, level](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      spdlog::log(level, "{}: {}", what, ex.what());
    }
  };
}

reply error_reply(unsigned status, const char* message) {
  return {status, std::string("{\"error\":\"") + message + "\"}", "application/json", {}};
}

// Writes one response; false when the connection is to end (write failed or not kept).
asio::awaitable<bool> send(beast::tcp_stream& stream, http::response<http::string_body> res,
                           std::chrono::milliseconds timeout) {
  stream.expires_after(timeout);
  auto [ec, n] = co_await http::async_write(stream, res, use_tuple);
  co_return !ec && res.keep_alive();
}

}  // namespace

listener::listener(status_source& status, listener_limits limits)
    : status_(status), limits_(limits), acceptor_(ioc_) {}

listener::~listener() { stop(); }

boost::system::error_code listener::listen(const config::endpoint& ep) {
  boost::system::error_code ec;
  tcp::resolver resolver(ioc_);
  auto results = resolver.resolve(ep.host, std::to_string(ep.port), tcp::resolver::passive, ec);
  if (ec) return ec;
  if (results.empty()) return asio::error::host_not_found;
  auto local = results.begin()->endpoint();
  acceptor_.open(local.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(local, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  boost::system::error_code ignored;
  if (ec) acceptor_.close(ignored);
  return ec;
}

void listener::start() {
  asio::co_spawn(ioc_, accept_loop(), logged("admin: accept loop ended", spdlog::level::err));
  thread_ = std::thread([this] {
    for (;;) {
      try {
        ioc_.run();
        break;
      } catch (const std::exception& e) {
        spdlog::error("admin: {}", e.what());
      }
    }
  });
}

void listener::stop() {
  ioc_.stop();
  if (thread_.joinable()) thread_.join();
  boost::system::error_code ignored;
  acceptor_.close(ignored);
}

asio::awaitable<void> listener::accept_loop() {
  for (;;) {
    auto [ec, socket] = co_await acceptor_.async_accept(use_tuple);
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
      spdlog::warn("admin: accept failed: {}", ec.message());
      asio::steady_timer t(ioc_, std::chrono::milliseconds(100));
      co_await t.async_wait(use_tuple);
      continue;
    }
    // Past the cap: closed at once, so that a scraper cannot pile up connections.
    if (open_ >= limits_.max_connections) {
      boost::system::error_code ignored;
      socket.close(ignored);
      continue;
    }
    // An exception ends one session, never the listener.
    asio::co_spawn(ioc_, session(std::move(socket)), logged("admin session", spdlog::level::warn));
  }
}

asio::awaitable<void> listener::session(tcp::socket socket) {
  counted count(open_);
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (bool first = true;; first = false) {
    // Between requests: up to idle_timeout for the next one to begin.
    if (!first && buffer.size() == 0) {
      stream.expires_after(limits_.idle_timeout);
      auto [ec, n] = co_await stream.async_read_some(buffer.prepare(limits_.max_head_bytes), use_tuple);
      if (ec) break;
      buffer.commit(n);
    }
    http::request_parser<http::empty_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(limits_.max_head_bytes));
    stream.expires_after(limits_.read_timeout);
    auto [ec, n] = co_await http::async_read_header(stream, buffer, parser, use_tuple);
    if (ec == http::error::header_limit) {
      auto res = make_response(error_reply(431, "request header fields too large"), false, false);
      co_await send(stream, std::move(res), limits_.read_timeout);
      break;
    }
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::operation_aborted)
      break;
    if (ec) {
      auto res = make_response(error_reply(400, "bad request"), false, false);
      co_await send(stream, std::move(res), limits_.read_timeout);
      break;
    }
    const auto& req = parser.get();
    const bool head = req.method() == http::verb::head;
    // No admin request has a body: refused before it is read, and the connection closed.
    if (parser.chunked() || parser.content_length().value_or(0) > 0) {
      auto res = make_response(error_reply(413, "request bodies are not accepted"), head, false);
      co_await send(stream, std::move(res), limits_.read_timeout);
      break;
    }
    const services with{inspector_.get()};
    auto answer = co_await serve(req.method_string(), req.target(), status_, with);
    auto res = make_response(std::move(answer), head, req.keep_alive());
    const bool keep = co_await send(stream, std::move(res), limits_.read_timeout);
    if (!keep) break;
  }
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

}  // namespace fg::admin
