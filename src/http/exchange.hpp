#pragma once
// One request's whole life on the gateway, apart from the connection that carried it:
// its admission (route, identity), its limits and what they said, a delay, the upstream
// choice and its retries, the request head and body sent up, the response read and
// relayed down with its rate-limit fields, and the access-log line. An exchange knows
// no downstream framing: it reads the request and its body from, and writes the answer
// to, its downstream `Down`, a type with these members (an HTTP/1.1 connection's
// session implements them, session_impl.hpp; a test's fake, exchange_test.cpp):
//
//   const bhttp::request_header<>& request() const;  bool keep_alive() const;
//   bool body_done() const;       // the request's body read whole (or it has none)
//   deadline::entry& watch();     // the exchange's deadline (its waits, its upstream)
//   const net::address& peer() const;  std::string_view peer_str() const;  // (peer().to_string())
//   std::string_view client_cert() const;  static constexpr std::string_view scheme;
//   std::string_view protocol() const;  // the access log's: "HTTP/1.1", "HTTP/2"
//   awaitable<bool> send_continue();   // "go on" (100-continue); false: the client is gone
//   bool start_body(bool chunked);     // the body's framing so far is sound (false: 400)
//   read_body(buf, size, produced)       // awaitable<error_code>: the next piece of the body
//   send_local(status, keep_alive, body, extra, content_type)  // awaitable<outcome>
//   bool begin_response(rp, extra, may_keep_alive, response_start&);  // the head, built
//   char* inline_room(n);         // room for a small body sent with the head
//   response_piece(head_too, data, n, last)  // the buffers of a write of the response
//   write(buffers)                // awaitable (error_code, size_t); its deadline renewed as the client reads
//   awaitable<bool> wait_turn(ms);          // true: the client went away meanwhile
//   awaitable<bool> upgrade(up, rp, extra, renew, every, stats&);  // a WebSocket tunnel (false: none)
//   bool client_gone() const;     // the client ended the request (an HTTP/2 stream's reset)
//   void set_trailers(fields);    // trailers to end the response with (HTTP/1.1: dropped)
//   void stream_idle(ms);         // a long-lived stream: its body's waits bounded by this
//
// The exchange's members are defined in exchange_limits.ipp (admission, the limits,
// local answers, the access log) and exchange_upstream.ipp (the upstream half).
// Beast-heavy: include only from the session's files and their tests.
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http/message.hpp>

#include <array>
#include <functional>
#include <vector>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "http/admission.hpp"
#include "http/body_write.hpp"
#include "http/response_parser.hpp"
#include "http/stream_io.hpp"
#include "http/trace_context.hpp"
#include "http/tunnel.hpp"
#include "http/upstream_failure.hpp"
#include "http/worker_context.hpp"
#include "limit/checks_cache.hpp"
#include "limit/decision_source.hpp"
#include "limit/keys.hpp"
#include "upstream/choice.hpp"
#include "upstream/pool.hpp"

namespace fg::upstream {
class h2_call;
class h2_session;
}  // namespace fg::upstream

namespace fg::http::detail {

using response_parser = http::response_parser;
// A response body of at most this many bytes (Content-Length framed), already read whole
// behind its head, goes down in one buffer with the head (relay_response).
constexpr std::size_t inline_body_max = 1024;

// What a downstream made of a response head (Down::begin_response): whether a body
// follows it, and whether the upstream's connection ends the body by closing.
struct response_start {
  bool body_expected = true;
  bool up_close_delimited = false;
  bool keep_alive = false;  // the downstream connection stays open after it
};

struct grpc_deadline;  // (exchange_h2.ipp)

// tracing.export: what a request's spans are made of, taken as it goes (exchange_spans.ipp).
struct span_try {
  std::array<char, 16> id{};  // the span the upstream is told is its parent
  clock::time_point start{}, end{};  // (end unset: the try that answered, ended with the request)
  std::string server;
  unsigned status = 0;  // the response head's
  std::string error;    // why it failed ("": it did not)
};
struct span_marks {
  bool on = false;       // the export is on: the request's times are taken
  bool sampled = false;  // its trace is sampled: its tries are marked too
  enum class verdict : std::uint8_t { none, allowed, delayed, denied, refused, unavailable };
  verdict decision = verdict::none;
  clock::time_point asked{}, decided{};  // the limits' call
  std::vector<span_try> tries;           // (at most max_span_tries)
};
constexpr std::size_t max_span_tries = 8;

template <class Down>
class exchange {
 public:
  exchange(worker_context& ctx, Down& down) : ctx_(ctx), down_(down) {}
  ~exchange();
  exchange(const exchange&) = delete;
  exchange& operator=(const exchange&) = delete;

  // The configuration snapshot a request is served under: the worker's when its head
  // arrived (a reload may swap the worker's meanwhile).
  void use_current() {
    if (rt_ != ctx_.rt) rt_ = ctx_.rt;
  }
  const compiled_config& rt() const { return *rt_; }

  // One request, in its downstream's frame (a frame per request costs an allocation's
  // worth): begin() admits it and holds what it uses until the scope ends; decide()
  // asks its limits (pending: co_await wait(source), then decided()); then
  // respond() answers it locally, refuses it, or forwards it in its turn.
  class scope;
  [[nodiscard]] scope begin();
  limit::status decide(limit::decision_source& source);
  auto wait(limit::decision_source& source) { return source.wait(limits_); }
  limit::status decided(limit::decision_source& source, error_code ec);
  asio::awaitable<outcome> respond(limit::status st);

  // A local answer to the request (its access-log line, then the downstream's write).
  asio::awaitable<outcome> answer(unsigned status, bool keep_alive, std::string_view body = {},
                                  std::string_view extra = {}, std::string_view content_type = {});
  // One access-log line and the request's metrics.
  void log_request(unsigned status);
  const std::string& request_id() const { return ad_.request_id; }
  // An idle connection's exchange holds no buffers.
  void release_memory();

 private:
  // exchange_limits.ipp: admission, the limits, refusals, a delay.
  limit::request_parts key_parts() const;
  limit::status ask_limits(limit::decision_source& source);
  // (`verdict`: the status passive health counts, by default the head's)
  void head_arrived(const config::route_config& route, clock::time_point t0, std::optional<unsigned> verdict = {});
  void charge_after(const response_head* res);
  asio::awaitable<outcome> refuse(limit::status st);
  void restate_denials();
  asio::awaitable<outcome> refuse_over_quota(std::uint64_t bytes);
  asio::awaitable<outcome> forward_in_turn();
  // After a refusal (429, 503), the connection stays open only if the unread body
  // cannot be mistaken for a request.
  bool keeps_after_refusal() const { return down_.keep_alive() && !ad_.has_body(); }

  // exchange_upstream.ipp: the upstream half.
  asio::awaitable<outcome> forward();
  void build_request_head(const config::route_config& route, bool upgrade);
  // The request body's first piece read into the body block (its size in `piece`), or
  // the answer that ends the request instead (417, 400, 408, 413, 429; closed: the
  // client is gone).
  asio::awaitable<std::optional<outcome>> read_first_piece(std::size_t& piece);
  void log_failure(const config::upstream_config& cfg, stage at, error_code ec, bool upstream_fault) const;
  std::optional<std::uint64_t> balance_key(const config::upstream_config& up) const;
  struct next_try {
    bool again = false;    // else answer `status`
    bool idle_ok = false;  // the next try may take a pooled connection
    unsigned status = 0;
  };
  // A try failed at `at`: the connection `up` dropped, the failure counted and logged,
  // what next (on the last try, what the body read so far costs is charged).
  next_try after_failure(const config::upstream_config& up_cfg, stage at, error_code ec, exchange_state& st,
                         upstream::connection_ptr& up);
  asio::awaitable<error_code> send_rest_of_body(upstream::connection& up, const config::upstream_config& cfg);
  // A fresh parser for the response head (1xx other than 101 are read past). It lives in
  // the exchange, not in a coroutine frame: Asio recycles frames only up to ~1 KiB, a
  // larger frame costs a malloc per request.
  void prepare_response_parser() {
    rp_.emplace();
    rp_->header_limit(64 * 1024);
    rp_->body_limit(boost::none);
    if (down_.request().method() == bhttp::verb::head) rp_->skip(true);
  }
  bool read_past(error_code& ec, unsigned& interim);
  asio::awaitable<outcome> relay_response(upstream::connection& up, const config::upstream_config& cfg,
                                          bool& reusable);
  asio::awaitable<outcome> run_upgrade(upstream::connection& up, unsigned status);
  // exchange_h2.ipp: to an HTTP/2 upstream.
  asio::awaitable<outcome> forward_h2();
  asio::awaitable<std::shared_ptr<upstream::h2_session>> connect_h2(const config::upstream_config& up_cfg,
                                                                    const upstream::upstream_servers& servers,
                                                                    error_code& ec, bool& pooled);
  asio::awaitable<std::optional<outcome>> h2_client_side(error_code ec);
  asio::awaitable<outcome> stream_h2(upstream::h2_call& call, const config::route_config& route,
                                     const config::upstream_config& cfg, clock::time_point t0, deadline::entry& upw);
  asio::awaitable<outcome> pump_h2(upstream::h2_call& call, char* buf);
  void head_arrived_h2(const config::route_config& route, upstream::h2_call& call, clock::time_point t0);
  asio::awaitable<outcome> relay_h2(upstream::h2_call& call, const config::upstream_config& cfg, deadline::entry& upw);
  void grpc_trailers(unsigned code, std::string_view message);
  void note_grpc_status(std::span<const std::pair<std::string, std::string>> fields);
  bool grpc_verdict_later(const upstream::h2_call& call) const;
  // The HTTP status passive health counts a call's end as: its grpc-status mapped (none
  // came: UNKNOWN, a 500).
  unsigned grpc_verdict() const;
  void watch_grpc_timeout(upstream::h2_call& call, grpc_deadline& d, const asio::any_io_executor& ex);
  bool grpc_request() const;
  // exchange_spans.ipp: tracing.export.
  void span_try_begin(std::string& head);
  void span_try_end(stage at, error_code ec, std::string_view why = {});
  void export_span(unsigned status);
  auto write_up(upstream::connection& up, std::span<const asio::const_buffer> bufs, std::chrono::milliseconds timeout);

  // Lent by the worker for one request's bodies (given back when its scope ends).
  char* body_buf() {
    if (!body_buf_) body_buf_ = ctx_.bodies.take();
    return body_buf_.get();
  }
  void give_back_body_buf() {
    if (body_buf_) ctx_.bodies.give(std::move(body_buf_));
  }

  worker_context& ctx_;
  Down& down_;
  std::shared_ptr<const compiled_config> rt_;
  lazy_optional<response_parser> rp_;
  bool early_answer_ = false;  // the upstream answered before the request's whole body
  upstream::choice choice_;  // this request's server (forward() ends its hold)
  std::unique_ptr<char[]> body_buf_;
  std::string head_out_;  // the request head sent upstream
  body_write writes_;  // the buffers of the upstream body write in flight
  admission ad_;
  chunk_vetter vetter_;  // the upstream response's chunked framing, followed as it comes
  std::string peer_key_;
  std::shared_ptr<const compiled_config> peer_key_rt_;
  limit::limit_call limits_;  // this request's limits and what they said
  limit::checks_cache checks_cache_;  // whether limits_.checks serve the client's next request
  std::uint64_t bytes_in_ = 0, bytes_out_ = 0;
  double upstream_ms_ = -1;
  std::int64_t delayed_ms_ = 0;  // how long this request waited for its turn (on_exceed: delay)
  clock::time_point started_;
  unsigned pump_failed_ = 0;  // an HTTP/2 upstream's body pump: the client's failure (its status)
  bool denial_ = false;       // the local answer being sent is a limit's denial
  bool deadline_passed_ = false;  // a gRPC call's grpc-timeout passed (DEADLINE_EXCEEDED)
  std::string grpc_extra_;    // a gRPC local answer's fields
  int grpc_status_ = -1;      // the access log's grpc_status for the request being answered
  span_marks spans_;          // tracing.export
};

// What one request holds while it is served: its place among the requests that use the
// worker's decision source (a reload keeps the old source while any does), its
// concurrency leases, and the body block; all given back when it ends, however.
template <class Down>
class exchange<Down>::scope {
 public:
  explicit scope(exchange& ex) : ex_(ex), in_use_(ex.ctx_.limits), leases_(ex.limits_) {}
  ~scope() { ex_.give_back_body_buf(); }
  scope(const scope&) = delete;
  scope& operator=(const scope&) = delete;
  // The decision source of the configuration the request is served under.
  limit::decision_source& source() const { return *in_use_.l->source; }

 private:
  struct in_use {
    http::limits_in_use* l;
    explicit in_use(http::limits_in_use* p) : l(p) { ++l->requests; }
    ~in_use() { --l->requests; }
  };
  exchange& ex_;
  in_use in_use_;
  limit::lease_guard leases_;  // (after in_use_: the leases go back first)
};

}  // namespace fg::http::detail
