#pragma once
// The upstream half of an exchange (members of exchange<Down>, exchange.hpp): send the
// request (head, then its body streamed), read the response head (one retry on a stale
// pooled connection, another server by upstream.retries), relay the body, or carry a
// WebSocket tunnel. Failures are mapped to answers in one place (upstream_failure.hpp).
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <spdlog/spdlog.h>

#include <array>

#include "http/exchange.hpp"
#include "http/exchange_limits.ipp"
#include "http/forwarder.hpp"
#include "upstream/send_batch.hpp"
#include "util/text.hpp"

namespace fg::http::detail {

inline bool is_idempotent(bhttp::verb v) {
  switch (v) {
    case bhttp::verb::get: case bhttp::verb::head: case bhttp::verb::options:
    case bhttp::verb::trace: case bhttp::verb::put: case bhttp::verb::delete_:
      return true;
    default:
      return false;
  }
}

// A client-side read error of the request body, as the exchange's table knows it.
inline error_code client_error(error_code ec) {
  return make_error_code(ec == beast::error::timeout ? body_errc::timeout : body_errc::malformed);
}

template <class Down>
auto exchange<Down>::write_up(upstream::connection& up, std::span<const asio::const_buffer> bufs,
                       std::chrono::milliseconds timeout) {
  down_.watch().arm(timeout);
  return asio::async_initiate<decltype(deferred_tuple), void(error_code, std::size_t)>(
      [&up, bufs](auto handler) {
        // Resumed with a batch from Redis: the batch's writes go out together (in plain TCP).
        const bool look = std::exchange(up.look_on_send, false);  // (see upstream::pool)
        if (up.tls) asio::async_write(up, bufs, std::move(handler));
        else if (auto* batch = upstream::send_batch::current()) batch->add(up.socket, bufs, std::move(handler), look);
        else asio::async_write(up.socket, bufs, std::move(handler));
      },
      deferred_tuple);
}

template <class Down>
void exchange<Down>::build_request_head(const config::route_config& route, bool upgrade) {
  const auto& cfg = *rt_->cfg;
  head_out_.clear();
  forward_context fc;
  fc.peer_ip = down_.peer_str();
  const auto& client = ad_.client;
  fc.peer_trusted = client.peer_trusted;
  fc.request_id = ad_.request_id;
  fc.traceparent = ad_.traceparent;
  fc.trace_continued = ad_.trace_continued;
  fc.upgrade = upgrade;
  fc.framing = ad_.framing;
  fc.target = ad_.abs_target;
  fc.host = ad_.abs_host;
  fc.default_host = rt_->upstream_hosts[route.upstream_index];
  fc.proto = Down::scheme;  // the listener's, not the client's say
  // What the upstream is told of the client: as admission resolved it.
  fc.xff = client.xff;
  fc.forwarded = client.forwarded;
  fc.client_header = cfg.client_ip.forward;
  fc.client_ip = client.who.from_header ? std::string_view(client.who_text) : std::string_view(down_.peer_str());
  if (!client.peer_trusted) fc.drop = rt_->untrusted_drop;
  else if (cfg.client_ip.forward_chain != config::client_ip_config::chain::full) fc.drop = rt_->client_ip.identity_fields();
  build_upstream_request(down_.request(), fc, head_out_);
}

// The first piece of a body is read before upstream is contacted: a malformed body is
// rejected with upstream having received nothing. A client that expects 100-continue is
// told to go on first.
template <class Down>
asio::awaitable<std::optional<outcome>> exchange<Down>::read_first_piece(std::size_t& piece) {
  if (ad_.has_expect && !util::iequals(ad_.expect, "100-continue")) co_return co_await answer(417, false);
  if (!ad_.has_body()) co_return std::nullopt;
  if (ad_.has_expect && !co_await down_.send_continue()) co_return outcome::closed;
  const bool chunked = ad_.framing.type == body_framing::kind::chunked;
  if (!down_.start_body(chunked)) co_return co_await answer(400, false);
  auto ec = co_await down_.read_body(body_buf(), body_chunk, piece);
  if (ec) co_return co_await answer(ec == beast::error::timeout ? 408 : 400, false);
  // Over the limit already: refused with upstream having received nothing (not charged).
  if (const auto max = rt_->cfg->http.max_body_bytes; max && piece > max) co_return co_await answer(413, false);
  if (chunked && piece > limit::body_bytes_left(limits_)) co_return co_await refuse_over_quota(piece);
  co_return std::nullopt;
}

template <class Down>
void exchange<Down>::log_failure(const config::upstream_config& cfg, stage at, error_code ec,
                                  bool upstream_fault) const {
  if (upstream_fault) spdlog::warn("upstream {} ({}): {}: {}", cfg.name, choice_.address(), describe(at, ec), ec.message());
  else spdlog::debug("{}: {}: {}", down_.peer_str(), describe(at, ec), ec.message());
}

// At the end of an exchange: no deadline on the upstream socket, the server let go.
struct forget_upstream {
  deadline::entry& e;
  upstream::choice& c;
  ~forget_upstream() {
    e.forget_upstream();
    c.end();
  }
};

// A try failed at `at`: again on the same server afresh (a stale pooled connection), on
// another server (upstream.retries), or the answer. Counted against the server when it
// was its fault, and logged.
template <class Down>
typename exchange<Down>::next_try exchange<Down>::after_failure(const config::upstream_config& up_cfg, stage at,
                                                                  error_code ec, exchange_state& st,
                                                                  upstream::connection_ptr& up) {
  down_.watch().forget_upstream();
  up.reset();
  if (spans_.sampled) span_try_end(at, ec);
  const auto action = on_failure(at, ec, st);
  if (action.retry) {
    st.first = false;
    return {true, false, 0};
  }
  // (a pooled connection the peer closed is no fault of the server's; a server that
  // does not answer in time is at fault on any connection)
  if (action.upstream)
    if (const auto why = health_failure(at, ec);
        why != upstream::failure_kind::none &&
        (!st.reused || at == stage::connect || why == upstream::failure_kind::timeout))
      choice_.failed(why, deadline::coarse_now);
  log_failure(up_cfg, at, ec, action.upstream);
  if (action.another_server && choice_.retry(deadline::coarse_now)) {
    st.first = true;
    return {true, true, 0};
  }
  charge_after(nullptr);  // (what of the body was read still counts)
  return {false, false, action.status};
}

// The time a step of a try may take: response_timeout, or what is left of the try's
// (upstream.try_timeout) when that is shorter.
inline std::chrono::milliseconds try_left(const config::upstream_config& up, clock::time_point try_end) {
  if (try_end == clock::time_point::max()) return up.response_timeout;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(try_end - deadline::coarse_now);
  return std::clamp(left, std::chrono::milliseconds{1}, up.response_timeout);
}

// balance: hash: the request's hash_key, hashed (nullopt: the request lacks it).
template <class Down>
std::optional<std::uint64_t> exchange<Down>::balance_key(const config::upstream_config& up) const {
  if (up.balance != config::balance::hash) return std::nullopt;
  std::string scratch;
  auto v = limit::source_value(up.hash_key, key_parts(), scratch);
  if (!v) return std::nullopt;
  return util::fnv1a(*v);
}

// Send the request, read the response head (one retry on a stale pooled connection),
// then relay the response or carry the upgraded connection. One coroutine frame for the
// whole exchange: a plain GET costs no more frames than this and the relay.
template <class Down>
asio::awaitable<outcome> exchange<Down>::forward() {
  const auto& route = rt_->cfg->routes[static_cast<std::size_t>(ad_.route)];
  const auto& up_cfg = rt_->upstreams[route.upstream_index];
  if (up_cfg.proto == config::upstream_config::protocol::h2) co_return co_await forward_h2();
  const auto& req = down_.request();
  const bool upgrade = ad_.has_upgrade && !ad_.has_body() && is_upgrade_request(req);
  build_request_head(route, upgrade);
  std::size_t piece = 0;
  if (ad_.has_body() || ad_.has_expect)
    if (auto answered = co_await read_first_piece(piece)) co_return *answered;
  // Timed for the metrics' histogram and the access log: two clock reads a request.
  const auto t0 = ctx_.metrics || (ctx_.access && ctx_.access->enabled()) ? clock::now() : clock::time_point{};
  upstream::connection_ptr up;
  // Declared after `up`, so destroyed before it: the sweeper never sees a freed socket.
  forget_upstream forget{down_.watch(), choice_};
  const auto& servers = rt_->servers->of(route.upstream_index);
  choice_.begin(*ctx_.pool, up_cfg, servers, balance_key(up_cfg), deadline::coarse_now);
  exchange_state st{.retry_safe = is_idempotent(req.method()) && !ad_.has_body()};
  for (bool idle_ok = true;;) {
    if (spans_.sampled) span_try_begin(head_out_);
    error_code ec;
    auto at = stage::connect;
    st.reused = st.try_expired = false;
    const auto try_end = up_cfg.try_timeout.count() > 0 ? deadline::coarse_now + up_cfg.try_timeout : clock::time_point::max();
    // (GCC 12: no co_await inside a conditional expression.)
    if (idle_ok) up = ctx_.pool->take_idle(up_cfg, down_.watch(), choice_.server());
    if (!up) up = co_await ctx_.pool->connect(up_cfg, down_.watch(), ec, choice_.server(), servers.tls.get());
    if (up) {
      at = stage::send;  // (head and first body piece in one write)
      st.reused = up->reused;
      const bool chunked = ad_.framing.type == body_framing::kind::chunked;
      auto bufs = writes_.assign(head_out_, body_buf_.get(), piece, chunked, chunked && down_.body_done());
      auto [wec, n] = co_await write_up(*up, bufs, try_left(up_cfg, try_end));
      ec = timed(down_.watch(), wec);
    }
    if (!ec && ad_.has_body()) {
      bytes_in_ += piece;
      ec = co_await send_rest_of_body(*up, up_cfg);
      if (ec && ec.category() == body_category()) at = stage::request_body;
    }
    // (an early answer's client connection then closes, and the upstream's is not pooled)
    const auto send_ec = ec;
    if ((early_answer_ = up && may_have_answered(at, ad_.has_body(), ec))) ec = {};
    // The response head; 1xx other than 101 are read past, up to max_interim_responses.
    unsigned interim = 0;
    for (bool more = !ec; more; more = read_past(ec, interim)) {
      at = stage::response_head;
      prepare_response_parser();
      std::size_t unused = 0;
      const auto left = try_left(up_cfg, try_end);
      ec = co_await read_into(down_.watch(), *up, up->buffer, *rp_, left, unused, true);
      st.try_expired = ec == beast::error::timeout && left < up_cfg.response_timeout;
    }
    if (ec && early_answer_) ec = send_ec, at = stage::send;  // no answer came: the write's failure is the try's
    if (!ec) break;
    const auto next = after_failure(up_cfg, at, ec, st, up);
    idle_ok = next.idle_ok;
    if (next.status == 429) co_return co_await refuse_over_quota(bytes_in_);  // (after_failure charged it)
    if (!next.again) co_return co_await answer(next.status, false);
  }
  head_arrived(route, t0);
  // Only a WebSocket upgrade we asked for becomes a tunnel: anything else would carry
  // the connection's later requests past routing and limits.
  if (rp_->get().result_int() == 101) {
    if (upgrade && is_websocket_response(rp_->get())) co_return co_await run_upgrade(*up, 101);
    spdlog::warn("upstream {}: unexpected 101 to a request that did not ask for a WebSocket upgrade", up_cfg.name);
    co_return co_await answer(502, false);
  }
  bool reusable = false;
  auto o = co_await relay_response(*up, up_cfg, reusable);
  down_.watch().forget_upstream();
  // An upgrade the upstream declined may leave it expecting another protocol: not reused.
  if (reusable && !upgrade && !early_answer_) ctx_.pool->release(up_cfg.name, std::move(up));
  co_return o;
}

// Interim answers (1xx) read past before a response: more is a 502 (Go's client stops
// at 5), so that an upstream cannot hold a request with 1xx alone.
constexpr unsigned max_interim_responses = 8;

// After a response head was read: whether it is an interim answer to read past (1xx
// other than 101), `interim` counting them; past the most, `ec` says malformed. So is
// a status below 100 (RFC 9110 §15 has 100-599; Beast reads any three digits), as
// nginx has it, not a line "HTTP/1.1 0" sent on.
template <class Down>
bool exchange<Down>::read_past(error_code& ec, unsigned& interim) {
  if (ec) return false;
  const auto code = rp_->get().result_int();
  if (code < 100) ec = bhttp::error::bad_status;
  if (ec || code >= 200 || code == 101) return false;
  if (++interim <= max_interim_responses) return true;
  ec = bhttp::error::bad_status;
  return false;
}

// The response head came: the server answered (its health), the time it took (the
// access log, the metrics), and the costs known now.
template <class Down>
void exchange<Down>::head_arrived(const config::route_config& route, clock::time_point t0,
                                  std::optional<unsigned> verdict) {
  choice_.answered(verdict ? *verdict : rp_->get().result_int(), deadline::coarse_now);
  if (spans_.sampled && !spans_.tries.empty() && spans_.tries.back().end == clock::time_point{})
    spans_.tries.back().status = rp_->get().result_int();
  if (t0 != clock::time_point{}) {
    const auto waited = clock::now() - t0;
    upstream_ms_ = std::chrono::duration<double, std::milli>(waited).count();
    if (ctx_.metrics)
      ctx_.metrics->upstream_time(route.slot, std::chrono::duration_cast<std::chrono::microseconds>(waited).count());
  }
  charge_after(&rp_->get());
}

// The rest of the request body, streamed; the client's errors come back as body_errc.
template <class Down>
asio::awaitable<error_code> exchange<Down>::send_rest_of_body(upstream::connection& up,
                                                              const config::upstream_config& cfg) {
  const auto& http = rt_->cfg->http;
  const bool chunked = ad_.framing.type == body_framing::kind::chunked;
  const std::uint64_t max = http.max_body_bytes ? http.max_body_bytes : ~std::uint64_t{0};
  const std::uint64_t quota = chunked ? limit::body_bytes_left(limits_) : ~std::uint64_t{0};
  auto too_large = [&] { return bytes_in_ > max || bytes_in_ > quota; };
  auto too_large_error = [&] { return make_error_code(bytes_in_ > max ? body_errc::too_large : body_errc::over_quota); };
  bool last_sent = !chunked || down_.body_done();  // went with the first piece
  while (!down_.body_done()) {
    if (too_large()) co_return too_large_error();
    std::size_t piece = 0;
    auto ec = co_await down_.read_body(body_buf(), body_chunk, piece);
    // Upstream sees an incomplete message and a closed connection, never a second one.
    if (ec) co_return client_error(ec);
    if (!piece && !down_.body_done()) continue;
    bytes_in_ += piece;
    // A body past the limit never gets its last chunk: upstream sees it cut short.
    last_sent = (!chunked || down_.body_done()) && !too_large();
    auto bufs = writes_.assign({}, body_buf_.get(), piece, chunked, last_sent);
    auto [wec, n] = co_await write_up(up, bufs, cfg.response_timeout);
    if (auto tec = timed(down_.watch(), wec)) co_return tec;
  }
  if (too_large()) co_return too_large_error();
  if (!last_sent) {
    auto bufs = writes_.assign({}, nullptr, 0, true, true);
    auto [wec, n] = co_await write_up(up, bufs, cfg.response_timeout);
    co_return timed(down_.watch(), wec);
  }
  co_return error_code{};
}

template <class Down>
asio::awaitable<outcome> exchange<Down>::relay_response(upstream::connection& up, const config::upstream_config& cfg,
                                                        bool& reusable) {
  auto& res = rp_->get();
  const unsigned status = res.result_int();
  // (a request whose body was not all read, the server having answered early: closed after)
  response_start plan;
  const bool framed = down_.begin_response(*rp_, limits_.headers, !early_answer_, plan);
  // An upstream's chunked framing is followed as it arrives too: malformed, it is a
  // 502 (or a cut connection) at once, not a wait for the response timeout.
  chunk_vetter* vet = plan.body_expected && rp_->chunked() ? &vetter_ : nullptr;
  if (vet && !start_vetting(vetter_, up.buffer)) {
    spdlog::warn("upstream {}: bad chunked response: {}", cfg.name, vetter_.error());
    co_return co_await answer(502, false);
  }
  // A coding other than chunked would reach the client undone and unnamed (the body is
  // framed anew), and beside a Content-Length it is ambiguous: a 502, as nginx answers it.
  if (!framed && plan.body_expected) {
    spdlog::warn("upstream {}: a response's Transfer-Encoding other than chunked", cfg.name);
    co_return co_await answer(502, false);
  }
  exchange_state st;
  // A body of Content-Length: 0 is complete with the head: nothing to wait for.
  bool complete = !plan.body_expected || rp_->is_done();
  // A small body already read whole behind the head (most API answers) is parsed right
  // behind the head where the downstream keeps it: head and body go down as one
  // buffer, and no body block is lent (at more connections in flight than the worker
  // keeps blocks for, each lending was a 32 KiB allocation).
  const auto length = rp_->content_length();
  char* buf = !complete && length && *length <= inline_body_max && up.buffer.size() >= *length && !rp_->chunked()
                  ? down_.inline_room(static_cast<std::size_t>(*length))
                  : nullptr;
  const std::size_t window = buf ? static_cast<std::size_t>(*length) : body_chunk;
  if (!buf) buf = body_buf();
  do {
    std::size_t piece = 0;
    error_code ec;
    if (!complete) {
      res.body().data = buf;
      res.body().size = window;
      if (auto r = feed(up.buffer, *rp_, window, piece, false)) ec = *r;
      else ec = co_await read_into(down_.watch(), up, up.buffer, *rp_, cfg.response_timeout, piece, false, vet);
      complete = !ec && rp_->is_done();
    }
    if (ec) {
      // Mid-response failure: close without completing the framing, so the client
      // can tell the response is truncated.
      auto action = on_failure(stage::response_body, ec, st);
      spdlog::warn("upstream {}: {}: {}", cfg.name, describe(stage::response_body, ec), ec.message());
      if (spans_.sampled) span_try_end(stage::response_body, ec);
      if (action.status) co_return co_await answer(action.status, false);
      log_request(status);
      co_return outcome::closed;
    }
    auto bufs = down_.response_piece(!st.response_begun, buf, piece, complete);
    if (bufs.empty()) continue;
    auto [dec, dn] = co_await down_.write(bufs);
    if (timed(down_.watch(), dec)) co_return outcome::closed;
    st.response_begun = true;
    bytes_out_ += piece;
  } while (!complete);
  log_request(status);
  reusable = rp_->keep_alive() && !plan.up_close_delimited;
  co_return plan.keep_alive ? outcome::keep_going : outcome::close;
}

// A WebSocket upgrade the upstream accepted: the 101 goes down, then both ways are
// carried as bytes until either side ends. Concurrency leases are held for the tunnel's
// life, renewed well before they expire; one access-log line when it ends.
template <class Down>
asio::awaitable<outcome> exchange<Down>::run_upgrade(upstream::connection& up, unsigned status) {
  std::function<void()> renew;
  const auto every = std::chrono::milliseconds(limit::renewal_interval_ms(limits_));
  if (every.count() > 0) renew = [this] { limits_.holder->renew(limits_); };
  tunnel_stats stats;
  if (!co_await down_.upgrade(up, *rp_, limits_.headers, std::move(renew), every, stats)) co_return outcome::closed;
  bytes_in_ += stats.down_to_up;
  bytes_out_ += stats.up_to_down;
  log_request(status);
  co_return outcome::closed;
}

}  // namespace fg::http::detail

#include "http/exchange_h2.ipp"  // (forward() hands an HTTP/2 upstream's requests to it)
