#pragma once
// The session's reading of requests, its local answers and the limits (members of
// session<Stream>, session_impl.hpp); the upstream exchange is session_upstream.ipp.
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include <array>
#include <charconv>
#include <optional>

#include "http/responses.hpp"
#include "http/session_impl.hpp"
#include "limit/denial.hpp"
#include "limit/keys.hpp"
#include "limit/rate_headers.hpp"
#include "net/peek.hpp"
#include "obs/access_log.hpp"
#include "obs/logging.hpp"
#include "obs/metrics.hpp"

namespace fg::http::detail {

template <class Stream>
session<Stream>::session(worker_context& ctx, Stream stream, connection_slot slot, const net::address& peer,
                         bool resumed)
    : ctx_(ctx), conn_(ctx, std::move(stream), std::move(slot)), peer_(peer), peer_str_(peer.to_string()),
      requests_(resumed ? 1 : 0) {}

template <class Stream>
session<Stream>::~session() {
  // Whatever ended the request, its concurrency leases go back.
  limit::lease_guard::release(limits_);
  give_back_body_buf();
}

template <class Stream>
asio::awaitable<typename session<Stream>::outcome> session<Stream>::read_head(bool first) {
  const auto& http = rt_->cfg->http;
  const auto max = http.max_header_bytes;
  // Room for a whole head of http.max_header_bytes and one byte more (what tells 431),
  // whatever a reload made of it.
  auto& buffer = conn_.buffer();
  auto& watch = conn_.watch();
  buffer.max_size(std::max({connection<Stream>::buffer_max, max + 1, buffer.size()}));
  scanner_.reset();
  auto deadline = first ? deadline::after(http.header_timeout) : clock::time_point::max();
  for (;;) {
    // Tolerate empty lines between pipelined requests (RFC 9112 §2.2).
    while (bytes_of(buffer).starts_with("\r\n")) buffer.consume(2);
    if (buffer.size() > 0) {
      watch.set_busy();
      if (deadline == clock::time_point::max()) deadline = deadline::after(http.header_timeout);
      auto data = bytes_of(buffer).substr(0, max + 1);
      auto st = scanner_.scan(data);
      if (st == head_scanner::state::complete) {
        if (scanner_.head_size() > max) co_return co_await send_local(431, false);
        break;
      }
      if (st == head_scanner::state::bad) {
        spdlog::debug("{}: rejected request: {}", peer_str_, scanner_.error());
        co_return co_await send_local(400, false);
      }
      if (buffer.size() > max) co_return co_await send_local(431, false);
    } else {
      watch.set_idle();
      if (ctx_.draining) {
        watch.stay_awake();
        co_return outcome::close;
      }
    }
    watch.arm_at(deadline == clock::time_point::max() ? deadline::after(http.idle_timeout) : deadline);
    if constexpr (is_socket<Stream> || is_tls<Stream>) {
      if (watch.lean()) {
        // Idle for a while: wait for bytes with no buffer at all.
        release_idle_memory();
        auto [wec] = co_await socket_of(conn_.stream())->async_wait(tcp::socket::wait_read, deferred_tuple);
        watch.woke();
        if (wec && watch.expired()) {
          watch.set_busy();  // the sweeper must not take back the answer's write
          if (!first) co_return outcome::close;
          co_return co_await send_local(408, false);
        }
        if (wec) co_return outcome::closed;
      }
    }
    // (not while OpenSSL holds bytes of the client's: the socket would not show them)
    if (buffer.size() == 0 && !holds_input(conn_.stream()))
      watch.lean_at(deadline::after(deadline::lean_after));
    // A head usually fits in 4 KiB: reads grow past that only for larger ones.
    auto space = std::min<std::size_t>(buffer.max_size() - buffer.size(), buffer.size() ? 16384 : 4096);
    // (a read of no bytes completes at once: a full buffer would spin, never time out)
    if (space == 0) co_return co_await send_local(431, false);
    auto [ec, n] = co_await conn_.stream().async_read_some(buffer.prepare(space), read_token<Stream>());
    // The sweeper took back an idle read to wait without its buffer: between requests the
    // connection is parked (no session at all), a new one waits here with nothing held.
    if (ec == asio::error::operation_aborted && watch.lean() && !watch.expired() && !ctx_.draining) {
      if (!first && buffer.size() == 0 && !holds_input(conn_.stream())) co_return outcome::park;
      continue;
    }
    watch.woke();
    watch.stay_awake();
    if (ec && watch.expired()) {
      // An idle keep-alive connection just closes; a slow or silent request head gets 408.
      if (buffer.size() == 0 && !first) co_return outcome::close;
      co_return co_await send_local(408, false);
    }
    if (ec) co_return outcome::closed;
    buffer.commit(n);
  }
  if (auto refused = parse_head()) co_return co_await send_local(refused, false);
  watch.set_busy();
  co_return outcome::keep_going;
}

// Beast parses the head we have vetted: 0, or the status that refuses it (400; 431 for
// a field Beast cannot hold, over 64 KiB, even where http.max_header_bytes allows the head).
template <class Stream>
unsigned session<Stream>::parse_head() {
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(rt_->cfg->http.max_header_bytes + 4));
  parser_->body_limit(boost::none);
  parser_->eager(false);
  error_code ec;
  std::size_t used = 0;
  try {
    used = parser_->put(asio::buffer(conn_.buffer().data().data(), scanner_.head_size()), ec);
  } catch (const std::length_error& e) {
    spdlog::debug("{}: rejected request: {}", peer_str_, e.what());
    parser_.emplace();  // (the one that threw is half-filled)
    return 431;
  }
  if (ec || !parser_->is_header_done()) {
    spdlog::debug("{}: rejected request: {}", peer_str_, ec ? ec.message() : "incomplete head");
    return 400;
  }
  conn_.buffer().consume(used);
  parser_->eager(true);
  return 0;
}

template <class Stream>
asio::awaitable<bool> session<Stream>::run() {
  for (;;) {
    if (rt_ != ctx_.rt) rt_ = ctx_.rt;
    auto o = co_await read_head(requests_ == 0);
    if (o == outcome::park) co_return true;
    if (o == outcome::keep_going) {
      // One request, in this frame (a frame per request costs an allocation's worth),
      // under the configuration in effect when its head arrived, to its end: the
      // snapshot (rt_) and the decision source that came with it (a reload may swap
      // ctx_'s meanwhile; the worker keeps the old source while a request holds rt_).
      if (rt_ != ctx_.rt) rt_ = ctx_.rt;
      struct in_use {
        http::limits_in_use* l;
        explicit in_use(http::limits_in_use* p) : l(p) { ++l->requests; }
        ~in_use() { --l->requests; }
      } using_limits(ctx_.limits);
      auto* limits = using_limits.l->source;
      begin_request();
      limit::lease_guard leases(limits_);  // given back when the request ends, however
      auto st = ad_.status ? limit::status::ok : ask_limits(*limits);
      if (st == limit::status::pending) {
        auto [ec] = co_await limits->wait(limits_);
        st = limits->finish(limits_, ec);
      }
      if (st == limit::status::ok && limits_.refusal) st = limit::status::refused;
      if (ad_.status) o = co_await send_local(ad_.status, ad_.keep_alive, ad_.body);
      else if (st != limit::status::ok) o = co_await refuse(st);
      else o = co_await forward_in_turn();
      give_back_body_buf();
    }
    if (o == outcome::close) co_await lingering_close();
    if (o != outcome::keep_going) break;
  }
  close_stream(conn_.stream());
  co_return false;
}

template <class Stream>
void session<Stream>::begin_request() {
  ++requests_;
  if (ctx_.access && ctx_.access->enabled()) started_ = clock::now();
  bytes_in_ = bytes_out_ = 0;
  upstream_ms_ = -1;
  delayed_ms_ = 0;
  limits_.headers.clear();
  limits_.asked = false;
  limits_.refusal = 0;
  early_answer_ = false;
  if (peer_key_rt_ != rt_) peer_key_ = rt_->client_ip.key_of(peer_), peer_key_rt_ = rt_;
  admit(*rt_, parser_->get().base(), parser_->keep_alive(), {peer_, peer_str_, peer_key_}, ad_);
}

template <class Stream>
void session<Stream>::release_idle_memory() {
  if constexpr (is_tls<Stream>) conn_.stream().release_buffers();
  conn_.buffer().shrink_to_fit();  // empty: gives the storage back
  parser_.release();
  rp_.release();
  give_back_body_buf();
  std::string().swap(head_out_);
  ad_.release_memory();
  limits_.release_memory();
  checks_cache_.release_memory();
}

// Whether the client has sent all it is going to (nginx's `lingering_close on`): its
// request read whole, no byte past it here, in OpenSSL or on the socket (under TLS, or
// only its close_notify). A client that asked for the close (or was told) then sends
// nothing more, and is not waited for.
template <class Stream>
bool session<Stream>::nothing_more_coming() {
  if constexpr (is_socket<Stream> || is_tls<Stream>) {
    if (conn_.buffer().size() != 0 || holds_input(conn_.stream())) return false;
    if (!parser_ || !parser_->is_header_done() || !parser_->is_done()) return false;
    // (its end already: nothing to drain either)
    if (net::peek_input(socket_of(conn_.stream())->native_handle()) != net::pending_input::bytes) return true;
    // (a TLS client that read its answer closes with close_notify, often before this look)
    if constexpr (is_tls<Stream>) return conn_.stream().read_close_notify();
    return false;
  } else {
    return false;
  }
}

template <class Stream>
asio::awaitable<void> session<Stream>::lingering_close() {
  if (nothing_more_coming()) {
    if constexpr (is_tls<Stream>) conn_.stream().send_close_notify();
    co_return;  // (run() closes the socket: our response is sent before the FIN)
  }
  // Half-close, then drain what the client is still sending so that our response is
  // not destroyed by a reset; bounded in time and bytes.
  error_code ec;
  half_close(conn_.stream(), ec);
  if (ec) co_return;
  auto until = clock::now() + std::chrono::seconds(2);
  std::size_t total = 0;
  char sink[4096];
  while (total < 4 * 1024 * 1024) {
    conn_.watch().arm_at(until);
    auto [rec, n] = co_await conn_.stream().async_read_some(asio::buffer(sink), read_token<Stream>());
    if (rec) break;
    total += n;
  }
}

template <class Stream>
asio::awaitable<typename session<Stream>::outcome> session<Stream>::send_local(unsigned status, bool keep_alive,
                                                                              std::string_view body,
                                                     std::string_view extra, std::string_view content_type) {
  bool head = parser_ && parser_->is_header_done() && parser_->get().method() == bhttp::verb::head;
  keep_alive = keep_alive && !ctx_.draining;
  local_response r;
  r.status = status;
  r.body = body;
  r.keep_alive = keep_alive;
  r.request_id = ad_.request_id;
  r.head = head;
  r.extra = extra;
  if (!content_type.empty()) r.content_type = content_type;
  auto text = render(r);
  if (parser_ && parser_->is_header_done()) log_request(status);
  else if (requests_ == 0 || conn_.buffer().size()) {
    // Rejected before a request head was parsed: still counted, and one access-log line.
    if (ctx_.metrics) ctx_.metrics->request(obs::metrics_layout::none, status);
    started_ = clock::now();
    auto* log = ctx_.access.get();
    if (log && log->enabled())
      log->write({peer_str_, "-", "-", status, 0, 0, -1, 0, ad_.request_id, "", "", 0});
  }
  std::array<asio::const_buffer, 1> bufs{asio::buffer(text)};
  auto [ec, n] = co_await write_down(bufs);
  if (timed(conn_.watch(), ec)) co_return outcome::closed;
  co_return keep_alive ? outcome::keep_going : outcome::close;
}

template <class Stream>
void session<Stream>::log_request(unsigned status) {
  if (ctx_.metrics)
    ctx_.metrics->request(
        ad_.route >= 0 ? rt_->cfg->routes[static_cast<std::size_t>(ad_.route)].slot : obs::metrics_layout::none, status);
  auto* log = ctx_.access.get();
  if (!log || !log->enabled()) return;
  const auto& req = parser_->get();
  obs::access_record r;
  r.client_ip = ad_.client.who.key.empty() ? std::string_view(peer_str_) : std::string_view(ad_.client.who.key);
  r.method = req.method_string();
  r.target = req.target();
  r.status = status;
  r.bytes_in = bytes_in_;
  r.bytes_out = bytes_out_;
  r.upstream_ms = upstream_ms_;
  r.total_ms = std::chrono::duration<double, std::milli>(clock::now() - started_).count();
  r.request_id = ad_.request_id;
  if (ad_.route >= 0) r.route = rt_->cfg->routes[static_cast<std::size_t>(ad_.route)].name;
  r.delay_ms = delayed_ms_;
  for (const auto& c : limits_.checks)
    if (limits_.asked && !c.cfg->plan.empty()) {
      r.plan = c.cfg->plan;
      break;
    }
  log->write(r);
}

// A request field's value, for limit keys (limit::request_parts::header).
inline std::optional<std::string_view> lookup_header(const void* ctx, std::string_view name) {
  const auto& h = *static_cast<const bhttp::fields*>(ctx);
  auto it = h.find(name);
  if (it == h.end()) return std::nullopt;
  return std::string_view(it->value());
}

// What limit keys and a balancing hash read of the request.
template <class Stream>
limit::request_parts session<Stream>::key_parts() const {
  const auto& req = parser_->get();
  limit::request_parts parts;
  parts.client = ad_.client.who.key;
  parts.client_cert = client_cert_;
  std::string_view target = req.target();
  if (auto q = target.find('?'); q != std::string_view::npos) parts.query = target.substr(q + 1);
  parts.header = &lookup_header;
  parts.header_ctx = static_cast<const bhttp::fields*>(&req.base());
  parts.body_length = ad_.framing.type == body_framing::kind::length ? ad_.framing.length : 0;
  parts.chunked = ad_.framing.type == body_framing::kind::chunked;
  return parts;
}

template <class Stream>
limit::status session<Stream>::ask_limits(limit::decision_source& source) {
  const auto& route = rt_->cfg->routes[static_cast<std::size_t>(ad_.route)];
  if (route.limits.empty()) {
    // (a previous request's checks must not be read for this one: its delay, its config)
    limits_.checks.clear();
    limits_.decisions.clear();
    checks_cache_.forget();
    return limit::status::ok;
  }
  limits_.route = &route;
  limits_.asked = true;
  limits_.asked_source = &source;
  // The previous request's checks serve again when nothing they were built from
  // changed: the config, a route whose checks follow the client alone, the client.
  limits_.client = ad_.client.who.key;
  if (checks_cache_.serves(route, rt_.get(), ad_.client.who.key)) {
    limits_.refusal = 0;
  } else {
    limits_.refusal = limit::build_checks(limits_.checks, rt_->cfg->redis.key_prefix, route, key_parts(),
                                          limit::cluster_keys(*rt_->cfg), &rt_->consumers);
    checks_cache_.keep(!limits_.refusal && limit::checks_follow_client(route), route, rt_, ad_.client.who.key);
  }
  // A refused request (no or an unknown consumer key, a bad cost) still counts against
  // the route's other limits: over one of them it gets the 429, else its refusal.
  if (limits_.refusal && limits_.checks.empty()) return limit::status::refused;
  return source.start(limits_);
}

// A request its limits refused: the route's 429 (or its status), a 503 when the store
// failed and the route says deny, or a plan's 401/403; with a problem-details body (or
// the route's own).
template <class Stream>
asio::awaitable<typename session<Stream>::outcome> session<Stream>::refuse(limit::status st) {
  const auto& route = *limits_.route;
  auto& body = limits_.body;
  body.clear();
  if (st == limit::status::over_limit) {
    limit::append_denial_body(body, route, limits_.checks, limits_.decisions);
    co_return co_await send_local(route.response.status, keeps_after_refusal(), body, limits_.headers,
                                  limit::content_type(route.response));
  }
  if (st == limit::status::refused) {
    limit::append_refusal_body(body, route, limits_.refusal);
    co_return co_await send_local(limits_.refusal, keeps_after_refusal(), body,
                                  limits_.refusal == 401 ? "WWW-Authenticate: Key realm=\"floodgate\"\r\n" : "",
                                  "application/problem+json");
  }
  limit::append_unavailable_body(body, route);
  co_return co_await send_local(503, keeps_after_refusal(), body, "Retry-After: 1\r\n",
                                limit::content_type(route.response));
}

// A request its limits allowed, to be refused after all: some of its decisions turned
// into denials since; their rate-limit fields anew (as refuse() sends them).
template <class Stream>
void session<Stream>::restate_denials() {
  limits_.headers.clear();
  limit::append_rate_headers(limits_.headers, limits_.route->response.headers, limits_.checks, limits_.decisions,
                             true);
}

// A chunked body cut where it passed what its byte quotas had left (cost: body_bytes),
// `bytes` read: those limits' refusal, with Retry-After at their reset. The connection
// then closes (the rest of the body is unread). (Not a coroutine: refuse()'s frame is
// the only one.)
template <class Stream>
asio::awaitable<typename session<Stream>::outcome> session<Stream>::refuse_over_quota(std::uint64_t bytes) {
  limit::deny_over_body_quota(limits_, bytes);
  restate_denials();
  return refuse(limit::status::over_limit);
}

// The costs known once the upstream answered (`res`; null when the exchange failed
// before a response), charged to the limits that decided the request: a response
// header's number (charge: response_header:<Name>), and the rest of a chunked body
// counted by bytes (cost: body_bytes took 1 up front), read whether or not an answer
// came. Each limit takes at most its whole quota from one request.
template <class Stream>
void session<Stream>::charge_after(const response_head* res) {
  if (!limits_.asked || !limits_.asked_source) return;
  for (std::size_t i = 0; i < limits_.checks.size(); ++i) {
    const auto& l = *limits_.checks[i].cfg;
    std::uint64_t amount = 0;
    if (res && !l.charge_header.empty()) {
      const auto v = (*res)[l.charge_header];
      std::uint64_t n = 0;
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (!v.empty() && ec == std::errc{} && p == v.data() + v.size() && n <= 1'000'000'000) amount += n;
      // (a request whose own cost was 0 took 1 up front, build_checks: that 1 is part of this)
      if (amount && limits_.checks[i].cost == 1 && limit::request_cost(l, key_parts()) == std::uint64_t{0}) --amount;
    }
    if (l.cost_from == config::limit_config::cost_kind::body_bytes && ad_.framing.type == body_framing::kind::chunked &&
        bytes_in_ > 1)
      amount += bytes_in_ - 1;
    amount = std::min(amount, config::quota(l));
    if (amount) limits_.asked_source->charge(limits_, i, amount);
  }
}

// A request a limit admitted to wait for its turn (on_exceed: delay) waits, holding no
// upstream connection, then goes; one past the worker's http.max_delayed gets the
// route's 429 instead, and one whose client goes away meanwhile is dropped at once.
template <class Stream>
asio::awaitable<typename session<Stream>::outcome> session<Stream>::forward_in_turn() {
  std::int64_t wait = 0;
  for (std::size_t i = 0; i < limits_.checks.size(); ++i) {
    const auto& d = limits_.decisions[i];
    if (d.allowed && d.retry_ms > 0 && limits_.checks[i].cfg->max_delay.count() > 0 && !limits_.checks[i].cfg->shadow)
      wait = std::max(wait, d.retry_ms);
  }
  if (wait == 0) co_return co_await forward();
  if (ctx_.delayed >= rt_->cfg->http.max_delayed) {
    // (what it took stays taken: the worker is past what it holds for later)
    for (std::size_t i = 0; i < limits_.checks.size(); ++i)
      if (limits_.decisions[i].retry_ms > 0 && limits_.decisions[i].allowed) limits_.decisions[i].allowed = false;
    restate_denials();
    co_return co_await refuse(limit::status::over_limit);
  }
  delayed_ms_ = wait;
  ++ctx_.delayed;
  const bool gone = co_await wait_turn(std::chrono::milliseconds(wait));
  --ctx_.delayed;
  if (gone) {
    log_request(499);
    co_return outcome::closed;
  }
  co_return co_await forward();
}

// Waits `wait`; true when the client went away meanwhile (a plain connection's close is
// seen at once; a TLS one's bytes are OpenSSL's to read, so it waits its turn out).
template <class Stream>
asio::awaitable<bool> session<Stream>::wait_turn(std::chrono::milliseconds wait) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(conn_.stream().get_executor());
  timer.expires_after(wait);
  conn_.watch().arm(wait + std::chrono::seconds(1));
  auto* sock = socket_of(conn_.stream());
  if (sock && is_socket<Stream> && conn_.buffer().size() == 0) {
    auto r = co_await (timer.async_wait(util::use_tuple) || sock->async_wait(tcp::socket::wait_read, util::use_tuple));
    if (r.index() == 0) co_return conn_.watch().expired();
    if (net::peek_input(sock->native_handle()) == net::pending_input::end) co_return true;
  }
  // (bytes of the next request, pipelined, or a TLS stream: the turn is waited out)
  co_await timer.async_wait(util::use_tuple);
  co_return conn_.watch().expired();
}

}  // namespace fg::http::detail
