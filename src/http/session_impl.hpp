#pragma once
// The session class, shared by session.cpp (reading, forwarding) and
// session_limits.cpp (rate limiting). Beast-heavy: include only from those.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <array>
#include <chrono>
#include <list>
#include <optional>
#include <string>
#include <vector>

#include "app/context.hpp"
#include "http/framing.hpp"
#include "limit/decision.hpp"
#include "limit/memory_store.hpp"
#include "net/client_ip.hpp"
#include "upstream/pool.hpp"

namespace fg::http::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using asio::ip::tcp;
using error_code = boost::system::error_code;
using clock = std::chrono::steady_clock;
using request_parser = bhttp::request_parser<bhttp::buffer_body>;
using response_parser = bhttp::response_parser<bhttp::buffer_body>;
// Body bytes move through one buffer of this size per session, in both directions.
constexpr std::size_t body_chunk = 32 * 1024;
static_assert(body_chunk == 32 * 1024, "app::worker_context::bodies lends blocks of this size");

// An optional T kept on the heap, so that an idle connection can give its storage
// back (release()) while a busy one reuses it request after request.
template <class T>
class lazy_optional {
 public:
  T& emplace() {
    if (!box_) box_ = std::make_unique<std::optional<T>>();
    return box_->emplace();
  }
  void release() { box_.reset(); }
  explicit operator bool() const { return box_ && box_->has_value(); }
  T* operator->() { return &**box_; }
  const T* operator->() const { return &**box_; }
  T& operator*() { return **box_; }

 private:
  std::unique_ptr<std::optional<T>> box_;
};

class session {
 public:
  session(app::worker_context& ctx, tcp::socket socket, bool resumed)
      : ctx_(ctx), socket_(std::move(socket)), buffer_(64 * 1024), requests_(resumed ? 1 : 0) {
    error_code ec;
    auto ep = socket_.remote_endpoint(ec);
    if (!ec) peer_ = net::normalize(ep.address());
    peer_str_ = peer_.to_string();
    socket_.set_option(tcp::no_delay(true), ec);
    entry_ = ctx_.sessions.insert(ctx_.sessions.end(), app::session_entry{});
    entry_->socket = &socket_;
  }
  ~session() {
    give_back_body_buf();
    ctx_.sessions.erase(entry_);
    if (!parked_ && ctx_.connections) ctx_.connections->open.fetch_sub(1, std::memory_order_relaxed);
  }

  // True when the connection is to be parked (idle between requests): then take its
  // socket with release_socket() and its deadline with idle_deadline().
  asio::awaitable<bool> run();
  tcp::socket release_socket() {
    parked_ = true;
    return std::move(socket_);
  }
  clock::time_point idle_deadline() const { return entry_->deadline; }

 private:
  enum class outcome { keep_going, close, closed, park };

  asio::awaitable<outcome> read_head(bool first);
  asio::awaitable<outcome> handle();
  // What handle() settles before any I/O: a local answer (a status, with its
  // keep-alive and body) or, with status 0, on to the limits and upstream. A plain
  // function, so that its locals stay out of handle()'s coroutine frame: Asio recycles
  // frames only up to about 1 KiB, and a larger one costs an allocation per request.
  struct verdict {
    unsigned status = 0;
    bool keep_alive = false;
    std::string_view body;
  };
  verdict prepare(std::string_view& expect, bool& has_expect);
  // A field whose name with '_' for '-' is one the gateway reads or sets.
  bool interpreted_underscore(const bhttp::request_header<>& req) const;
  asio::awaitable<outcome> forward();
  // The route's limits, in plain functions around the one wait for Redis, so that a
  // limited request costs no coroutine frame of its own: begin_limits() builds the
  // keys and answers from the memory store or the local deny cache, or asks for Redis;
  // end_limits() takes Redis' answer (or error, under the route's on_store_error).
  // go_on: forward; limited: answer 429 with rate_headers_; unavailable: answer 503.
  enum class limits_step { go_on, ask_redis, limited, unavailable };
  limits_step begin_limits(const config::route_config& route);
  limits_step end_limits(const config::route_config& route, error_code ec);
  limits_step decide_in_memory(const config::route_config& route);
  limits_step decide(const config::route_config& route);
  void release_leases();
  // While a tunnel lasts: its leases' lifetimes start again (0 ms: none held).
  std::chrono::milliseconds lease_renewal_interval() const;
  void renew_leases();
  asio::awaitable<outcome> send_limited(const config::route_config& route, std::string_view headers);
  asio::awaitable<outcome> send_store_unavailable();
  void log_store_error(const config::route_config& route, const std::string& why);
  asio::awaitable<outcome> send_local(unsigned status, bool keep_alive, std::string_view body = {},
                                      std::string_view extra = {}, std::string_view content_type = {});
  asio::awaitable<void> lingering_close();
  // An idle keep-alive connection holds no buffers: they go back to the allocator,
  // and come again with the next request's bytes.
  void release_idle_memory();
  // Arm the deadline and return the write, a deferred operation (no coroutine frame):
  // `co_await` it for (error_code, bytes) and pass the error through timed().
  // Defined in session.cpp, their only user.
  auto write_down(std::span<const asio::const_buffer> bufs);
  auto write_up(upstream::connection& up, std::span<const asio::const_buffer> bufs, std::chrono::milliseconds timeout);
  void log_request(unsigned status);
  // Lent by the worker for one request's bodies (given back in run()).
  char* body_buf() {
    if (!body_buf_) body_buf_ = ctx_.bodies.take();
    return body_buf_.get();
  }
  void give_back_body_buf() {
    if (body_buf_) ctx_.bodies.give(std::move(body_buf_));
  }

  app::worker_context& ctx_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
  net::address peer_;
  std::string peer_str_;
  std::list<app::session_entry>::iterator entry_;
  std::shared_ptr<const app::runtime> rt_;
  head_scanner scanner_;
  lazy_optional<request_parser> parser_;
  lazy_optional<response_parser> rp_;
  std::vector<net::header_field> ip_fields_;
  std::unique_ptr<char[]> body_buf_;
  std::string head_out_;
  std::string request_id_;
  std::string path_;
  std::string client_key_;
  net::client_identity who_;  // the resolved client, when the peer is a trusted proxy
  std::string xff_, forwarded_, client_ip_text_;  // what the upstream is told (see forwarder.hpp)
  chunk_vetter vetter_;
  bool peer_trusted_ = false;  // under this request's config snapshot
  std::string peer_key_;
  std::shared_ptr<const app::runtime> peer_key_rt_;
  std::string abs_host_, abs_target_;
  bool has_upgrade_ = false;
  // Limits of the current request (evaluated, in route order) and what they said.
  std::vector<limit::check> checks_;
  std::vector<limit::decision> decisions_;
  std::string rate_headers_;  // for the upstream's response (or the 429)
  std::uint64_t lease_ = 0;
  std::int64_t limits_now_ = 0;  // the memory store's clock when the limits were asked
  bool leases_held_ = false;
  bool leases_in_redis_ = false;
  std::string nonce_;  // names this request's sliding_log entries and concurrency leases in Redis
  body_framing framing_;
  int route_ = -1;
  std::uint64_t bytes_in_ = 0, bytes_out_ = 0;
  double upstream_ms_ = -1;
  clock::time_point started_;
  std::size_t requests_ = 0;
  bool parked_ = false;
};

}  // namespace fg::http::detail
