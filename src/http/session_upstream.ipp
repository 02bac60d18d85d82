#pragma once
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <spdlog/spdlog.h>

#include <array>
#include <charconv>

#include "http/forwarder.hpp"
#include "http/response_plan.hpp"
#include "http/session_impl.hpp"
#include "http/tunnel.hpp"
#include "obs/access_log.hpp"
#include "obs/metrics.hpp"
#include "http/upstream_failure.hpp"
#include "upstream/send_batch.hpp"
#include "util/text.hpp"

// The upstream exchange of one admitted request: send the request (head, then its body
// streamed), read the response head (one retry on a stale pooled connection), relay the
// body, or carry a WebSocket tunnel. Failures are mapped to answers in one place
// (upstream_failure.hpp).
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

// Feeds buffered bytes to the parser without suspending. A result when done, nullopt
// when the parser needs bytes from the socket. Body mode (`want_head` false,
// buffer_body): done when some body bytes were produced, the body buffer is full, or
// the message is complete. Head mode: done when the head is parsed.
template <class Parser>
std::optional<error_code> feed(beast::flat_buffer& b, Parser& p, std::size_t start, std::size_t& produced, bool want_head) {
  while (b.size() > 0) {
    error_code ec;
    auto used = p.put(b.data(), ec);
    b.consume(used);
    if (want_head) {
      if (p.is_header_done()) return error_code{};
    } else {
      produced = start - p.get().body().size;
      if (ec == bhttp::error::need_buffer || p.is_done() || produced > 0) return error_code{};
    }
    if (ec && ec != bhttp::error::need_more) return ec;
    if (used > 0 && !ec) continue;
    if (b.size() >= b.max_size()) return error_code(bhttp::error::header_limit);
    break;
  }
  return std::nullopt;
}

// Feeds already-buffered bytes to a parser, reading from the socket only when the
// parser needs more (see feed). With `vet`, each byte read is also followed through a
// chunked body's framing as it arrives, so a malformed one fails at once instead of
// when the parser gives up.
template <class Stream, class Parser>
asio::awaitable<error_code> read_into(deadline::entry& e, Stream& s, beast::flat_buffer& b, Parser& p,
                                      std::chrono::milliseconds timeout, std::size_t& produced, bool want_head,
                                      chunk_vetter* vet = nullptr) {
  std::size_t start = want_head ? 0 : p.get().body().size;
  produced = 0;
  for (;;) {
    if (auto r = feed(b, p, start, produced, want_head)) co_return *r;
    e.arm(timeout);
    auto space = std::min<std::size_t>(b.max_size() - b.size(), 65536);
    auto [ec, n] = co_await s.async_read_some(b.prepare(space), read_token<Stream>());
    if (ec == asio::error::eof) {
      if (want_head) co_return error_code(b.size() ? bhttp::error::partial_message : bhttp::error::end_of_stream);
      error_code eec;
      p.put_eof(eec);
      produced = start - p.get().body().size;
      co_return eec ? error_code(bhttp::error::partial_message) : error_code{};
    }
    if (ec) co_return timed(e, ec);
    b.commit(n);
    if (vet && vet->feed(bytes_of(b).substr(b.size() - n)) == chunk_vetter::state::bad)
      co_return error_code(bhttp::error::bad_chunk);
  }
}

// A chunked body's framing is followed from its first byte: those already buffered
// behind the head first (false if they are malformed), then each read's (read_into).
inline bool start_vetting(chunk_vetter& v, const beast::flat_buffer& buffered) {
  v.reset();
  return v.feed(bytes_of(buffered)) != chunk_vetter::state::bad;
}

// A client-side read error of the request body, as the exchange's table knows it.
inline error_code client_error(error_code ec) {
  return make_error_code(ec == beast::error::timeout ? body_errc::timeout : body_errc::malformed);
}

template <class Stream>
auto session<Stream>::write_up(upstream::connection& up, std::span<const asio::const_buffer> bufs,
                       std::chrono::milliseconds timeout) {
  conn_.watch().arm(timeout);
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

template <class Stream>
void session<Stream>::build_request_head(const config::route_config& route, bool upgrade) {
  const auto& cfg = *rt_->cfg;
  head_out_.clear();
  forward_context fc;
  fc.peer_ip = peer_str_;
  const auto& client = ad_.client;
  fc.peer_trusted = client.peer_trusted;
  fc.request_id = ad_.request_id;
  fc.upgrade = upgrade;
  fc.framing = ad_.framing;
  fc.target = ad_.abs_target;
  fc.host = ad_.abs_host;
  fc.default_host = rt_->upstream_hosts[route.upstream_index];
  fc.proto = is_tls<Stream> ? "https" : "http";  // the listener's, not the client's say
  // What the upstream is told of the client: as admission resolved it.
  fc.xff = client.xff;
  fc.forwarded = client.forwarded;
  fc.client_header = cfg.client_ip.forward;
  fc.client_ip = client.who.from_header ? std::string_view(client.who_text) : std::string_view(peer_str_);
  if (!client.peer_trusted) fc.drop = rt_->untrusted_drop;
  else if (cfg.client_ip.forward_chain != config::client_ip_config::chain::full) fc.drop = rt_->client_ip.identity_fields();
  build_upstream_request(parser_->get().base(), fc, head_out_);
}

// The first piece of a body is read before upstream is contacted: a malformed body is
// rejected with upstream having received nothing. A client that expects 100-continue is
// told to go on first.
template <class Stream>
asio::awaitable<typename session<Stream>::first_piece> session<Stream>::read_first_piece() {
  auto& req = parser_->get();
  if (ad_.has_expect && req.version() >= 11) {
    static constexpr std::string_view cont = "HTTP/1.1 100 Continue\r\n\r\n";
    std::array<asio::const_buffer, 1> bufs{asio::buffer(cont)};
    auto [ec, n] = co_await write_down(bufs);
    if (timed(conn_.watch(), ec)) co_return first_piece{.client_gone = true};
  }
  const bool chunked = ad_.framing.type == body_framing::kind::chunked;
  if (chunked && !start_vetting(vetter_, conn_.buffer())) {
    spdlog::debug("{}: rejected request: {}", peer_str_, vetter_.error());
    co_return first_piece{.refuse = 400};
  }
  req.body().data = body_buf();
  req.body().size = body_chunk;
  first_piece out;
  auto ec = co_await read_into(conn_.watch(), conn_.stream(), conn_.buffer(), *parser_, rt_->cfg->http.idle_timeout, out.bytes, false,
                               chunked ? &vetter_ : nullptr);
  if (ec) out.refuse = ec == beast::error::timeout ? 408 : 400;
  // Over the limit already: refused with upstream having received nothing.
  else if (const auto max = rt_->cfg->http.max_body_bytes; max && out.bytes > max) out.refuse = 413;
  else if (chunked && out.bytes > limit::body_bytes_left(limits_)) out.refuse = 429;
  co_return out;
}

template <class Stream>
void session<Stream>::log_failure(const config::upstream_config& cfg, stage at, error_code ec,
                                  bool upstream_fault) const {
  if (upstream_fault) spdlog::warn("upstream {} ({}): {}: {}", cfg.name, choice_.address(), describe(at, ec), ec.message());
  else spdlog::debug("{}: {}: {}", peer_str_, describe(at, ec), ec.message());
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
template <class Stream>
typename session<Stream>::next_try session<Stream>::after_failure(const config::upstream_config& up_cfg, stage at,
                                                                  error_code ec, exchange_state& st,
                                                                  upstream::connection_ptr& up) {
  conn_.watch().forget_upstream();
  up.reset();
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
template <class Stream>
std::optional<std::uint64_t> session<Stream>::balance_key(const config::upstream_config& up) const {
  if (up.balance != config::balance::hash) return std::nullopt;
  std::string scratch;
  auto v = limit::source_value(up.hash_key, key_parts(), scratch);
  if (!v) return std::nullopt;
  return util::fnv1a(*v);
}

// Send the request, read the response head (one retry on a stale pooled connection),
// then relay the response or carry the upgraded connection. One coroutine frame for the
// whole exchange: a plain GET costs no more frames than this and the relay.
template <class Stream>
asio::awaitable<typename session<Stream>::outcome> session<Stream>::forward() {
  const auto& req = parser_->get();
  const auto& route = rt_->cfg->routes[static_cast<std::size_t>(ad_.route)];
  const auto& up_cfg = rt_->upstreams[route.upstream_index];
  const bool upgrade = ad_.has_upgrade && !ad_.has_body() && is_upgrade_request(req.base());
  build_request_head(route, upgrade);
  std::size_t piece = 0;
  if (ad_.has_expect && !util::iequals(ad_.expect, "100-continue")) co_return co_await send_local(417, false);
  if (ad_.has_body()) {
    const auto first = co_await read_first_piece();
    if (first.client_gone) co_return outcome::closed;
    if (first.refuse == 429) co_return co_await refuse_over_quota(first.bytes);  // (upstream got none: not charged)
    if (first.refuse) co_return co_await send_local(first.refuse, false);
    piece = first.bytes;
  }
  // Timed for the metrics' histogram and the access log: two clock reads a request.
  const auto t0 = ctx_.metrics || (ctx_.access && ctx_.access->enabled()) ? clock::now() : clock::time_point{};
  upstream::connection_ptr up;
  // Declared after `up`, so destroyed before it: the sweeper never sees a freed socket.
  forget_upstream forget{conn_.watch(), choice_};
  const auto& servers = rt_->servers->of(route.upstream_index);
  choice_.begin(*ctx_.pool, up_cfg, servers, balance_key(up_cfg), deadline::coarse_now);
  exchange_state st{.retry_safe = is_idempotent(req.method()) && !ad_.has_body()};
  for (bool idle_ok = true;;) {
    error_code ec;
    auto at = stage::connect;
    st.reused = st.try_expired = false;
    const auto try_end = up_cfg.try_timeout.count() > 0 ? deadline::coarse_now + up_cfg.try_timeout : clock::time_point::max();
    // (GCC 12: no co_await inside a conditional expression.)
    if (idle_ok) up = ctx_.pool->take_idle(up_cfg, conn_.watch(), choice_.server());
    if (!up) up = co_await ctx_.pool->connect(up_cfg, conn_.watch(), ec, choice_.server(), servers.tls.get());
    if (up) {
      at = stage::send;  // (head and first body piece in one write)
      st.reused = up->reused;
      const bool chunked = ad_.framing.type == body_framing::kind::chunked;
      auto bufs = writes_.assign(head_out_, body_buf_.get(), piece, chunked, chunked && parser_->is_done());
      auto [wec, n] = co_await write_up(*up, bufs, try_left(up_cfg, try_end));
      ec = timed(conn_.watch(), wec);
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
      ec = co_await read_into(conn_.watch(), *up, up->buffer, *rp_, left, unused, true);
      st.try_expired = ec == beast::error::timeout && left < up_cfg.response_timeout;
    }
    if (ec && early_answer_) ec = send_ec, at = stage::send;  // no answer came: the write's failure is the try's
    if (!ec) break;
    const auto next = after_failure(up_cfg, at, ec, st, up);
    idle_ok = next.idle_ok;
    if (next.status == 429) co_return co_await refuse_over_quota(bytes_in_);  // (after_failure charged it)
    if (!next.again) co_return co_await send_local(next.status, false);
  }
  head_arrived(route, t0);
  // Only a WebSocket upgrade we asked for becomes a tunnel: anything else would carry
  // the connection's later requests past routing and limits.
  if (rp_->get().result_int() == 101) {
    if (upgrade && is_websocket_response(rp_->get())) co_return co_await run_upgrade(*up, 101);
    spdlog::warn("upstream {}: unexpected 101 to a request that did not ask for a WebSocket upgrade", up_cfg.name);
    co_return co_await send_local(502, false);
  }
  bool reusable = false;
  auto o = co_await relay_response(*up, up_cfg, reusable);
  conn_.watch().forget_upstream();
  // An upgrade the upstream declined may leave it expecting another protocol: not reused.
  if (reusable && !upgrade && !early_answer_) ctx_.pool->release(up_cfg.name, std::move(up));
  co_return o;
}

// The response head came: the server answered (its health), the time it took (the
// access log, the metrics), and the costs known now.
template <class Stream>
void session<Stream>::head_arrived(const config::route_config& route, clock::time_point t0) {
  choice_.answered(rp_->get().result_int(), deadline::coarse_now);
  if (t0 != clock::time_point{}) {
    const auto waited = clock::now() - t0;
    upstream_ms_ = std::chrono::duration<double, std::milli>(waited).count();
    if (ctx_.metrics)
      ctx_.metrics->upstream_time(route.slot, std::chrono::duration_cast<std::chrono::microseconds>(waited).count());
  }
  charge_after(&rp_->get());
}

// The rest of the request body, streamed; the client's errors come back as body_errc.
template <class Stream>
asio::awaitable<error_code> session<Stream>::send_rest_of_body(upstream::connection& up,
                                                              const config::upstream_config& cfg) {
  const auto& http = rt_->cfg->http;
  const bool chunked = ad_.framing.type == body_framing::kind::chunked;
  auto* vet = chunked ? &vetter_ : nullptr;
  auto& req = parser_->get();
  const std::uint64_t max = http.max_body_bytes ? http.max_body_bytes : ~std::uint64_t{0};
  const std::uint64_t quota = chunked ? limit::body_bytes_left(limits_) : ~std::uint64_t{0};
  auto too_large = [&] { return bytes_in_ > max || bytes_in_ > quota; };
  auto too_large_error = [&] { return make_error_code(bytes_in_ > max ? body_errc::too_large : body_errc::over_quota); };
  bool last_sent = !chunked || parser_->is_done();  // went with the first piece
  while (!parser_->is_done()) {
    if (too_large()) co_return too_large_error();
    req.body().data = body_buf();
    req.body().size = body_chunk;
    std::size_t piece = 0;
    auto ec = co_await read_into(conn_.watch(), conn_.stream(), conn_.buffer(), *parser_, http.idle_timeout, piece, false, vet);
    // Upstream sees an incomplete message and a closed connection, never a second one.
    if (ec) co_return client_error(ec);
    if (!piece && !parser_->is_done()) continue;
    bytes_in_ += piece;
    // A body past the limit never gets its last chunk: upstream sees it cut short.
    last_sent = (!chunked || parser_->is_done()) && !too_large();
    auto bufs = writes_.assign({}, body_buf_.get(), piece, chunked, last_sent);
    auto [wec, n] = co_await write_up(up, bufs, cfg.response_timeout);
    if (auto tec = timed(conn_.watch(), wec)) co_return tec;
  }
  if (too_large()) co_return too_large_error();
  if (!last_sent) {
    auto bufs = writes_.assign({}, nullptr, 0, true, true);
    auto [wec, n] = co_await write_up(up, bufs, cfg.response_timeout);
    co_return timed(conn_.watch(), wec);
  }
  co_return error_code{};
}

template <class Stream>
asio::awaitable<typename session<Stream>::outcome> session<Stream>::relay_response(upstream::connection& up,
                                                                                  const config::upstream_config& cfg,
                                                                                  bool& reusable) {
  const auto& req = parser_->get();
  auto& res = rp_->get();
  const unsigned status = res.result_int();
  // (a request whose body was not all read, the server having answered early: closed after)
  auto plan = plan_response(req.base(), parser_->keep_alive() && !early_answer_, *rp_, ctx_.draining);
  // An upstream's chunked framing is followed as it arrives too: malformed, it is a
  // 502 (or a cut connection) at once, not a wait for the response timeout.
  chunk_vetter* vet = plan.body_expected && rp_->chunked() ? &vetter_ : nullptr;
  if (vet && !start_vetting(vetter_, up.buffer)) {
    spdlog::warn("upstream {}: bad chunked response: {}", cfg.name, vetter_.error());
    co_return co_await send_local(502, false);
  }
  plan.rc.extra = limits_.headers;
  head_out_.clear();
  // A coding other than chunked would reach the client undone and unnamed (the body is
  // framed anew), and beside a Content-Length it is ambiguous: a 502, as nginx answers it.
  if (!build_downstream_response(res, plan.rc, head_out_) && plan.body_expected) {
    spdlog::warn("upstream {}: a response's Transfer-Encoding other than chunked", cfg.name);
    co_return co_await send_local(502, false);
  }
  const bool down_chunked = plan.rc.framing == response_framing::chunked;
  const std::size_t head_len = head_out_.size();
  exchange_state st;
  // A body of Content-Length: 0 is complete with the head: nothing to wait for.
  bool complete = !plan.body_expected || rp_->is_done();
  // A small body already read whole behind the head (most API answers) is parsed into
  // head_out_ right after the head: head and body go down as one buffer, and no body
  // block is lent (at more connections in flight than the worker keeps blocks for,
  // each lending was a 32 KiB allocation).
  const auto length = rp_->content_length();
  const bool inline_body = !complete && plan.rc.framing == response_framing::length && length &&
                           *length <= inline_body_max && up.buffer.size() >= *length;
  std::size_t window = body_chunk;
  char* buf = nullptr;
  if (inline_body) {
    window = static_cast<std::size_t>(*length);
    head_out_.resize(head_len + window);
    buf = head_out_.data() + head_len;
  } else {
    buf = body_buf();
  }
  do {
    std::size_t piece = 0;
    error_code ec;
    if (!complete) {
      res.body().data = buf;
      res.body().size = window;
      if (auto r = feed(up.buffer, *rp_, window, piece, false)) ec = *r;
      else ec = co_await read_into(conn_.watch(), up, up.buffer, *rp_, cfg.response_timeout, piece, false, vet);
      complete = !ec && rp_->is_done();
    }
    if (ec) {
      // Mid-response failure: close without completing the framing, so the client
      // can tell the response is truncated.
      auto action = on_failure(stage::response_body, ec, st);
      spdlog::warn("upstream {}: {}: {}", cfg.name, describe(stage::response_body, ec), ec.message());
      if (action.status) co_return co_await send_local(action.status, false);
      log_request(status);
      co_return outcome::closed;
    }
    const std::string_view head(head_out_.data(), st.response_begun ? 0 : head_len);
    auto bufs = inline_body && !st.response_begun
                    ? writes_.assign(std::string_view(head_out_.data(), head_len + piece), nullptr, 0, false, false)
                    : writes_.assign(head, buf, piece, down_chunked, complete && down_chunked);
    if (bufs.empty()) continue;
    auto [dec, dn] = co_await write_down(bufs);
    if (timed(conn_.watch(), dec)) co_return outcome::closed;
    st.response_begun = true;
    bytes_out_ += piece;
  } while (!complete);
  log_request(status);
  reusable = rp_->keep_alive() && !plan.up_close_delimited;
  co_return plan.rc.keep_alive ? outcome::keep_going : outcome::close;
}

// A WebSocket upgrade the upstream accepted: the 101 goes down, then both ways are
// carried as bytes until either side ends. Concurrency leases are held for the tunnel's
// life, renewed well before they expire; one access-log line when it ends.
template <class Stream>
asio::awaitable<typename session<Stream>::outcome> session<Stream>::run_upgrade(upstream::connection& up,
                                                                               unsigned status) {
  auto plan = plan_response(parser_->get().base(), parser_->keep_alive(), *rp_, ctx_.draining);
  plan.rc.upgrade = true;
  plan.rc.keep_alive = false;
  plan.rc.extra = limits_.headers;
  head_out_.clear();
  build_downstream_response(rp_->get(), plan.rc, head_out_);
  std::array<asio::const_buffer, 1> bufs{asio::buffer(head_out_)};
  auto [dec, dn] = co_await write_down(bufs);
  if (timed(conn_.watch(), dec)) co_return outcome::closed;
  std::function<void()> renew;
  const auto every = std::chrono::milliseconds(limit::renewal_interval_ms(limits_));
  if (every.count() > 0) renew = [this] { limits_.holder->renew(limits_); };
  if constexpr (is_socket<Stream> || is_tls<Stream>) {
    auto stats = co_await run_tunnel(conn_.watch(), conn_.stream(), conn_.buffer(), up, up.buffer, rt_->cfg->http.idle_timeout,
                                     std::move(renew), every);
    bytes_in_ += stats.down_to_up;
    bytes_out_ += stats.up_to_down;
  }
  log_request(status);
  co_return outcome::closed;
}

}  // namespace fg::http::detail
