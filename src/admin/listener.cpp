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

#include <boost/url/parse.hpp>

#include "admin/access.hpp"
#include "admin/routes.hpp"
#include "obs/logging.hpp"
#include "util/asio.hpp"

namespace fg::admin {

using util::use_tuple;

using asio::ip::tcp;

namespace {


bhttp::response<bhttp::string_body> make_response(reply r, bool head, bool keep_alive) {
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(r.status), 11};
  res.set(bhttp::field::content_type, r.content_type);
  res.set(bhttp::field::cache_control, "no-store");
  if (!r.allow.empty()) res.set(bhttp::field::allow, r.allow);
  if (!r.www_authenticate.empty()) res.set(bhttp::field::www_authenticate, r.www_authenticate);
  if (r.retry_after) res.set(bhttp::field::retry_after, std::to_string(r.retry_after));
  res.keep_alive(keep_alive);
  res.body() = std::move(r.body);
  res.prepare_payload();
  // HEAD: the same head (Content-Length included), no body.
  if (head) res.body().clear();
  return res;
}

constexpr std::string_view admin_header_name = admin_header;

reply error_reply(unsigned status, const char* message) {
  return {status, std::string("{\"error\":\"") + message + "\"}", "application/json", {}};
}

// Writes one response; false when the connection is to end (write failed or not kept).
asio::awaitable<bool> send(beast::tcp_stream& stream, bhttp::response<bhttp::string_body> res,
                           std::chrono::milliseconds timeout) {
  stream.expires_after(timeout);
  auto [ec, n] = co_await bhttp::async_write(stream, res, use_tuple);
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
  asio::co_spawn(ioc_, accept_loop(), obs::logged_end{"admin: accept loop ended"});
  thread_ = std::thread([this] { obs::run_logged(ioc_, "admin"); });
}

void listener::stop() {
  ioc_.stop();
  if (thread_.joinable()) thread_.join();
  boost::system::error_code ignored;
  acceptor_.close(ignored);
}

// A session's place in conns_, given up when the session ends (or its frame is destroyed).
struct listener::registration {
  registration(listener& owner, conn_list::iterator at) : l(owner), it(at) {}
  listener& l;
  conn_list::iterator it;
  ~registration() { l.forget(it); }
  registration(const registration&) = delete;
  registration& operator=(const registration&) = delete;
};

void listener::forget(conn_list::iterator it) {
  if (!it->gone) {
    --open_;
    if (auto p = per_peer_.find(it->peer); p != per_peer_.end() && --p->second == 0) per_peer_.erase(p);
  }
  conns_.erase(it);
}

bool listener::evict(const std::string* peer) { return evict(peer, false) || evict(peer, true); }

bool listener::evict(const std::string* peer, bool reading) {
  // conns_ runs from the longest in its state: a session goes to the back when its
  // state changes.
  for (auto& c : conns_) {
    if (c.busy || c.gone || c.reading != reading || (peer && c.peer != *peer)) continue;
    c.gone = true;
    --open_;
    if (auto p = per_peer_.find(c.peer); p != per_peer_.end() && --p->second == 0) per_peer_.erase(p);
    boost::system::error_code ignored;
    c.stream->socket().close(ignored);
    ++evicted_;
    return true;
  }
  return false;
}

bool listener::make_room(const std::string& peer) {
  if (auto p = per_peer_.find(peer); p != per_peer_.end() && p->second >= limits_.max_per_peer && !evict(&peer))
    return false;
  return open_ < limits_.max_connections || evict(nullptr);
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
    boost::system::error_code pec;
    auto peer = socket.remote_endpoint(pec).address().to_string();
    // Full, and every connection busy with a request: this one is closed at once.
    if (pec || !make_room(peer)) {
      boost::system::error_code ignored;
      socket.close(ignored);
      if (++refused_ % 1000 == 1)
        spdlog::warn("admin: {} connection(s) refused so far: every admin connection is busy", refused_);
      continue;
    }
    // An exception ends one session, never the listener.
    asio::co_spawn(ioc_, session(std::move(socket), std::move(peer)), obs::logged_end{"admin session", false});
  }
}

asio::awaitable<reply> listener::answer(const bhttp::request<bhttp::empty_body>& req, const std::string& peer) {
  const auto target = req.target();
  auto url = boost::urls::parse_origin_form(target);
  const auto cfg = status_.current_config();
  request_facts facts;
  facts.method = req.method_string();
  facts.path = url ? std::string_view(url->encoded_path()) : std::string_view();
  const auto field = [&](auto name) -> std::optional<std::string_view> {
    auto it = req.find(name);
    if (it == req.end()) return std::nullopt;
    return it->value();
  };
  facts.host = field(bhttp::field::host);
  facts.authorization = field(bhttp::field::authorization);
  facts.has_origin = req.find(bhttp::field::origin) != req.end();
  auto admin_header = field(admin_header_name);
  facts.has_admin_header = admin_header && !admin_header->empty();
  if (cfg && url) {
    if (auto refused = refuse(facts, cfg->admin)) co_return std::move(*refused);
    // A /limits call is a store read per limit: bounded so that it cannot load the store.
    if (facts.path == "/limits" && (req.method() == bhttp::verb::get || req.method() == bhttp::verb::head) &&
        !limits_budget_.take(peer, std::chrono::steady_clock::now(), cfg->admin)) {
      reply busy{429, "{\"error\":\"too many /limits calls (admin.limits_rate, admin.limits_rate_per_peer)\"}",
                 "application/json", {}};
      busy.retry_after = limits_budget_.wait_s();
      co_return busy;
    }
  }
  const services with{inspector_.get()};
  co_return co_await serve(req.method_string(), target, status_, with);
}

asio::awaitable<void> listener::session(tcp::socket socket, std::string peer) {
  beast::tcp_stream stream(std::move(socket));
  ++open_;
  ++per_peer_[peer];
  registration reg{*this, conns_.insert(conns_.end(), conn{peer, &stream, std::chrono::steady_clock::now()})};
  // Its state changes: at the back of the line for room, in order of `since`.
  const auto now_in = [&](bool busy, bool reading) {
    reg.it->busy = busy;
    reg.it->reading = reading;
    reg.it->since = std::chrono::steady_clock::now();
    conns_.splice(conns_.end(), conns_, reg.it);
  };
  beast::flat_buffer buffer;
  for (bool first = true;; first = false) {
    // Before a request: its first bytes, within read_timeout of the connection or
    // idle_timeout of the last answer.
    if (buffer.size() == 0) {
      stream.expires_after(first ? limits_.read_timeout : limits_.idle_timeout);
      auto [ec, n] = co_await stream.async_read_some(buffer.prepare(limits_.max_head_bytes), use_tuple);
      if (ec || reg.it->gone) break;
      buffer.commit(n);
    }
    now_in(false, true);
    bhttp::request_parser<bhttp::empty_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(limits_.max_head_bytes));
    // (the first request's time counts from the connection)
    if (!first) stream.expires_after(limits_.read_timeout);
    auto [ec, n] = co_await bhttp::async_read_header(stream, buffer, parser, use_tuple);
    if (reg.it->gone) break;
    if (ec == bhttp::error::header_limit) {
      auto res = make_response(error_reply(431, "request header fields too large"), false, false);
      co_await send(stream, std::move(res), limits_.read_timeout);
      break;
    }
    if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::operation_aborted)
      break;
    if (ec) {
      auto res = make_response(error_reply(400, "bad request"), false, false);
      co_await send(stream, std::move(res), limits_.read_timeout);
      break;
    }
    const auto& req = parser.get();
    const bool head = req.method() == bhttp::verb::head;
    // No admin request has a body: refused before it is read, and the connection closed.
    if (parser.chunked() || parser.content_length().value_or(0) > 0) {
      auto res = make_response(error_reply(413, "request bodies are not accepted"), head, false);
      co_await send(stream, std::move(res), limits_.read_timeout);
      break;
    }
    now_in(true, false);
    auto res = make_response(co_await answer(req, peer), head, req.keep_alive());
    const bool keep = co_await send(stream, std::move(res), limits_.read_timeout);
    if (!keep || reg.it->gone) break;
    // Idle again: last in line to be closed for room.
    now_in(false, false);
  }
  boost::system::error_code ignored;
  if (!reg.it->gone) stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

}  // namespace fg::admin
