#pragma once
// The upstream half of an exchange to an HTTP/2 upstream (upstreams.<name>.protocol: h2;
// members of exchange<Down>, exchange.hpp): the request as a stream on a worker's
// shared connection to the server (upstream/h2_session.hpp), its body streamed up while
// the response streams down (a bidirectional gRPC call needs both at once), trailers
// relayed, and a gRPC request's failures answered as gRPC statuses.
//
// Retries (RFC 9113 §8.7): a stream the server refused (REFUSED_STREAM, above a GOAWAY's
// last stream id, or never sent before its connection failed) goes again, to another
// connection or server, whatever its method, while its whole body is still at hand (it
// came in the first piece); a request the server began to process is never sent twice.
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <openssl/ssl.h>

#include "http/exchange.hpp"
#include "http/exchange_limits.ipp"
#include "http/h2_fields.hpp"
#include "upstream/h2_session.hpp"

namespace fg::http::detail {

// A TLS connection whose server chose h2 by ALPN (without it, it speaks HTTP/1.1).
inline bool chose_h2(upstream::connection& c) {
  if (!c.tls) return true;
  const unsigned char* p = nullptr;
  unsigned n = 0;
  SSL_get0_alpn_selected(c.tls.native_handle(), &p, &n);
  return n == 2 && p[0] == 'h' && p[1] == '2';
}

// A gRPC call's own deadline (its grpc-timeout), for as long as the call's exchange
// has it: past it the upstream stream is cancelled and the call ends DEADLINE_EXCEEDED,
// whether or not its client cancels. `live` is false once the holder is gone, so that
// a handler already queued when the timer went finds nothing to do.
struct grpc_deadline {
  std::optional<asio::steady_timer> timer;
  std::shared_ptr<bool> live = std::make_shared<bool>(true);
  grpc_deadline() = default;
  grpc_deadline(const grpc_deadline&) = delete;
  grpc_deadline& operator=(const grpc_deadline&) = delete;
  ~grpc_deadline() { *live = false; }
};

template <class Down>
unsigned exchange<Down>::grpc_verdict() const {
  return http_status_of_grpc(grpc_status_ >= 0 ? grpc_status_ : 2);
}

template <class Down>
asio::awaitable<outcome> exchange<Down>::forward_h2() {
  const auto& req = down_.request();
  const auto& route = rt_->cfg->routes[static_cast<std::size_t>(ad_.route)];
  const auto& up_cfg = rt_->upstreams[route.upstream_index];
  build_request_head(route, false);
  pump_failed_ = 0;
  deadline_passed_ = false;
  const auto& servers = rt_->servers->of(route.upstream_index);
  h2_head head;
  if (!h2_request_of(head_out_, servers.tls ? "https" : "http", te_trailers(req[bhttp::field::te]), head))
    co_return co_await answer(400, false);
  std::size_t piece = 0;
  if (ad_.has_body() || ad_.has_expect)
    if (auto answered = co_await read_first_piece(piece)) co_return *answered;
  const bool whole = !ad_.has_body() || down_.body_done();
  const auto t0 = clock::now();
  // The upstream's timeouts on an entry of their own; the client's entry (disarmed here,
  // armed by its own waits) ends the call when the client is gone or out of time.
  auto upw = ctx_.deadlines.open(nullptr);
  down_.watch().arm_at(clock::time_point::max());
  upstream::h2_call call;
  grpc_deadline deadline;  // (after the call: gone before it)
  watch_grpc_timeout(call, deadline, co_await asio::this_coro::executor);
  forget_upstream forget{down_.watch(), choice_};
  choice_.begin(*ctx_.pool, up_cfg, servers, balance_key(up_cfg), deadline::coarse_now);
  // (a failed try goes again only as HTTP/1.1's would, or refused: never processed)
  exchange_state st{.retry_safe = whole && is_idempotent(req.method())};
  for (;;) {
    if (spans_.sampled) span_try_begin(head.storage);
    error_code ec;
    auto at = stage::connect;
    const auto try_end = up_cfg.try_timeout.count() > 0 ? deadline::coarse_now + up_cfg.try_timeout : clock::time_point::max();
    auto session = ctx_.pool->take_h2(up_cfg, choice_.server());
    bool pooled = true;
    if (!session) session = co_await connect_h2(up_cfg, servers, ec, pooled);
    if (session && !deadline_passed_) {
      at = stage::send;
      upw->arm(try_left(up_cfg, try_end));
      if (!call.start(session, head.fields, ad_.has_body(), *upw, down_.watch()))
        ec = asio::error::connection_refused, at = stage::connect;
      else if (ad_.has_body()) ec = co_await call.send(body_buf_.get(), piece, whole);
      if (!pooled) session->unpool();  // (it ends with this call)
    }
    if (!ec && whole && !deadline_passed_) {
      at = stage::response_head;
      upw->arm(try_left(up_cfg, try_end));
      ec = co_await call.head();
      // (not run by a server going away: as refused)
      if (!ec && call.turned_away() && choice_.retry(deadline::coarse_now)) continue;
    }
    if (!ec && !deadline_passed_) break;
    if (auto o = co_await h2_client_side(ec)) co_return *o;
    if (ec == asio::error::timed_out) ec = beast::error::timeout;
    // Refused: never processed, it goes again (to another server if there is one).
    if (call.refused() && whole && choice_.retry(deadline::coarse_now)) continue;
    call.cancel();
    upstream::connection_ptr none;
    const auto next = after_failure(up_cfg, at, ec, st, none);
    if (next.status == 429) co_return co_await refuse_over_quota(bytes_in_);
    if (!next.again) co_return co_await answer(next.status, false);
  }
  bytes_in_ += piece;
  if (whole) {
    head_arrived_h2(route, call, t0);
    co_return co_await relay_h2(call, up_cfg, *upw);
  }
  // The rest of the body goes up while the response comes down; the pump's block is
  // its own (the relay's is body_buf()), held until the call is cancelled.
  using namespace asio::experimental::awaitable_operators;
  down_.stream_idle(up_cfg.stream_idle_timeout);
  auto pump_buf = ctx_.bodies.take();
  auto r = co_await (stream_h2(call, route, up_cfg, t0, *upw) || pump_h2(call, pump_buf.get()));
  call.cancel();  // (nghttp2 reads the pump's block no more)
  ctx_.bodies.give(std::move(pump_buf));
  const auto o = r.index() == 0 ? std::get<0>(r) : outcome::closed;
  // A body the client had not finished: its connection is not read again (the rest of
  // the body would be taken for a request).
  co_return o == outcome::keep_going && !down_.body_done() ? outcome::close : o;
}

// A try that ended on the client's side (it is gone, its body failed, or the call's
// grpc-timeout passed): the answer, if one can go; nullopt: the upstream's failure.
template <class Down>
asio::awaitable<std::optional<outcome>> exchange<Down>::h2_client_side(error_code ec) {
  const bool ended = deadline_passed_ || pump_failed_ || ec == asio::error::operation_aborted || down_.client_gone();
  if (spans_.sampled && ended)
    span_try_end(stage::send, {},
                 deadline_passed_ ? "cancelled: the call's grpc-timeout passed" : "cancelled: the client's side ended it");
  if (deadline_passed_) co_return co_await answer(504, false);  // (DEADLINE_EXCEEDED)
  if (pump_failed_ && pump_failed_ != 499) co_return co_await answer(pump_failed_, false);
  if (ec != asio::error::operation_aborted && !down_.client_gone() && !pump_failed_) co_return std::nullopt;
  log_request(499);
  co_return outcome::closed;
}

template <class Down>
void exchange<Down>::watch_grpc_timeout(upstream::h2_call& call, grpc_deadline& d, const asio::any_io_executor& ex) {
  const auto t = grpc_request() ? grpc_timeout(down_.request()["grpc-timeout"]) : std::nullopt;
  if (!t) return;
  d.timer.emplace(ex, *t);
  d.timer->async_wait([this, &call, live = d.live](error_code ec) {
    if (ec || !*live) return;  // (the call ended first: `this` and `call` may be gone)
    deadline_passed_ = true;
    call.cancel();
    down_.watch().expire_now();  // (the pump's wait for the client's body too)
  });
}

// A new connection to the chosen server, offered to the requests that follow (`pooled`
// false: the pool keeps enough, or a reload moved the server: the caller's only).
template <class Down>
asio::awaitable<std::shared_ptr<upstream::h2_session>> exchange<Down>::connect_h2(const config::upstream_config& up_cfg,
                                                                                 const upstream::upstream_servers& servers,
                                                                                 error_code& ec, bool& pooled) {
  auto c = co_await ctx_.pool->connect(up_cfg, down_.watch(), ec, choice_.server(), servers.tls.get());
  down_.watch().forget_upstream();
  down_.watch().arm_at(clock::time_point::max());
  if (c && !chose_h2(*c)) {
    spdlog::warn("upstream {} ({}): the server did not choose h2 by ALPN", up_cfg.name, choice_.address());
    c.reset(), ec = asio::error::no_protocol_option;
  }
  if (!c) co_return nullptr;
  auto session = std::make_shared<upstream::h2_session>(std::move(c));
  session->start();
  pooled = ctx_.pool->add_h2(up_cfg, choice_.server(), session);
  co_return session;
}

// The response head of a stream whose body is still going up, then its relay.
template <class Down>
asio::awaitable<outcome> exchange<Down>::stream_h2(upstream::h2_call& call, const config::route_config& route,
                                                   const config::upstream_config& cfg, clock::time_point t0,
                                                   deadline::entry& upw) {
  upw.arm(cfg.response_timeout);
  auto ec = co_await call.head();
  if (ec) {
    if (auto o = co_await h2_client_side(ec)) co_return *o;
    if (ec == asio::error::timed_out) ec = beast::error::timeout;
    exchange_state st;
    upstream::connection_ptr none;
    call.cancel();
    const auto next = after_failure(cfg, stage::response_head, ec, st, none);
    co_return co_await answer(next.status ? next.status : 502, false);
  }
  head_arrived_h2(route, call, t0);
  co_return co_await relay_h2(call, cfg, upw);
}

// The rest of the request body into `buf` and up as it comes; then it waits to be
// cancelled by the relay's end. The client's failure (gone, too large, over its quota,
// malformed, too slow) resets the upstream stream and says the client's status; the
// upstream's (a reset, a window that stays shut) is the relay's to find.
template <class Down>
asio::awaitable<outcome> exchange<Down>::pump_h2(upstream::h2_call& call, char* buf) {
  const auto max = rt_->cfg->http.max_body_bytes ? rt_->cfg->http.max_body_bytes : ~std::uint64_t{0};
  const auto quota = ad_.framing.type == body_framing::kind::chunked ? limit::body_bytes_left(limits_) : ~std::uint64_t{0};
  while (!down_.body_done() && !deadline_passed_) {
    std::size_t n = 0;
    auto ec = co_await down_.read_body(buf, body_chunk, n);
    if (deadline_passed_) break;
    if (ec || bytes_in_ + n > max || bytes_in_ + n > quota) {
      pump_failed_ = down_.client_gone() ? 499 : ec == beast::error::timeout ? 408 : ec ? 400
                     : bytes_in_ + n > max ? 413 : 429;
      call.cancel();
      break;
    }
    if (co_await call.send(buf, n, down_.body_done())) break;
    bytes_in_ += n;
  }
  if (down_.body_done()) down_.watch().arm_at(clock::time_point::max());  // (its last read's deadline over)
  asio::steady_timer forever(co_await asio::this_coro::executor, clock::time_point::max());
  co_await forever.async_wait(util::use_tuple);
  co_return outcome::closed;
}

template <class Down>
void exchange<Down>::head_arrived_h2(const config::route_config& route, upstream::h2_call& call, clock::time_point t0) {
  std::string text;
  h1_head_of(call.status(), call.fields(), call.ended_with_head(), text);
  prepare_response_parser();
  error_code ec;
  rp_->put(asio::buffer(text), ec);
  // A gRPC call's verdict for passive health is its grpc-status (eject.statuses reads it
  // as the HTTP status it maps to): in a trailers-only head, or at the end of the call.
  std::optional<unsigned> verdict;
  if (grpc_verdict_later(call)) {
    verdict = 0;
  } else if (grpc_request() && call.status() == 200) {
    note_grpc_status(call.fields());
    verdict = grpc_verdict();
  }
  head_arrived(route, t0, verdict);
}

// Whether the call's verdict for passive health waits for its trailers.
template <class Down>
bool exchange<Down>::grpc_verdict_later(const upstream::h2_call& call) const {
  return grpc_request() && call.status() == 200 && !call.ended_with_head();
}

// The response relayed as it comes, then its trailers. A gRPC call whose upstream
// stream fails after its head went down ends with grpc-status 14 (UNAVAILABLE).
template <class Down>
asio::awaitable<outcome> exchange<Down>::relay_h2(upstream::h2_call& call, const config::upstream_config& cfg,
                                                  deadline::entry& upw) {
  if (!rp_->is_header_done()) co_return co_await answer(502, false);
  const unsigned status = rp_->get().result_int();
  note_grpc_status(call.fields());  // (a trailers-only answer's)
  bool verdict_later = grpc_verdict_later(call);
  response_start plan;
  down_.begin_response(*rp_, limits_.headers, true, plan);
  down_.stream_idle(cfg.stream_idle_timeout);
  exchange_state st;
  char* buf = body_buf();
  bool complete = false;
  while (!complete) {
    std::size_t n = 0;
    error_code ec;
    upw.arm(st.response_begun ? cfg.stream_idle_timeout : cfg.response_timeout);
    if (plan.body_expected) ec = co_await call.read(buf, body_chunk, n);
    complete = !ec && (!plan.body_expected || call.done());
    if (ec && deadline_passed_) {
      grpc_trailers(4, "deadline exceeded");
      verdict_later = false;  // (the client's deadline: no verdict on the server)
      complete = true;
    } else if (ec) {
      if (ec == asio::error::operation_aborted || down_.client_gone() || pump_failed_) {
        log_request(pump_failed_ ? pump_failed_ : 499);
        co_return outcome::closed;
      }
      if (ec == asio::error::timed_out) ec = beast::error::timeout;
      spdlog::warn("upstream {}: {}: {}", cfg.name, describe(stage::response_body, ec), ec.message());
      if (spans_.sampled) span_try_end(stage::response_body, ec);
      if (!grpc_request()) {
        log_request(status);
        co_return outcome::closed;  // (cut short: the client sees it so)
      }
      grpc_trailers(14, "upstream stream failed");
      complete = true;
    } else if (complete && !call.trailers().empty()) {
      down_.set_trailers(call.trailers());
      note_grpc_status(call.trailers());
    }
    auto bufs = down_.response_piece(!st.response_begun, buf, n, complete);
    if (bufs.empty()) continue;
    auto [dec, dn] = co_await down_.write(bufs);
    if (timed(down_.watch(), dec)) {
      log_request(499);
      co_return outcome::closed;
    }
    // (the write's deadline is over: only the upstream's bounds the wait that follows,
    // unless the client's body is still coming, whose reads bound it)
    if (down_.body_done()) down_.watch().arm_at(clock::time_point::max());
    st.response_begun = true;
    bytes_out_ += n;
  }
  if (verdict_later) choice_.answered(grpc_verdict(), deadline::coarse_now);
  log_request(status);
  co_return plan.keep_alive ? outcome::keep_going : outcome::close;
}

// The grpc-status among an upstream's fields, for the access log.
template <class Down>
void exchange<Down>::note_grpc_status(std::span<const std::pair<std::string, std::string>> fields) {
  for (const auto& [n, v] : fields)
    if (n == "grpc-status") {
      int code = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), code);
      if (ec == std::errc{} && p == v.data() + v.size() && code >= 0 && code < 100) grpc_status_ = code;
    }
}

template <class Down>
void exchange<Down>::grpc_trailers(unsigned code, std::string_view message) {
  grpc_status_ = static_cast<int>(code);
  const std::pair<std::string, std::string> t[] = {{"grpc-status", std::to_string(code)},
                                                   {"grpc-message", std::string(message)}};
  down_.set_trailers(t);
}

}  // namespace fg::http::detail
