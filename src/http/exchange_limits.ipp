#pragma once
// The exchange's admission, limits, local answers and access log (members of
// exchange<Down>, exchange.hpp); the upstream half is exchange_upstream.ipp.
#include <spdlog/spdlog.h>

#include <charconv>
#include <optional>

#include "http/exchange.hpp"
#include "http/exchange_spans.ipp"
#include "http/grpc.hpp"
#include "limit/denial.hpp"
#include "limit/keys.hpp"
#include "limit/rate_headers.hpp"
#include "obs/access_log.hpp"
#include "obs/metrics.hpp"

namespace fg::http::detail {

template <class Down>
exchange<Down>::~exchange() {
  // Whatever ended the request, its concurrency leases go back.
  limit::lease_guard::release(limits_);
  give_back_body_buf();
}

// Admits the request whose head the downstream holds (http/admission.hpp), under the
// snapshot use_current() took.
template <class Down>
typename exchange<Down>::scope exchange<Down>::begin() {
  if ((spans_.on = ctx_.spans && rt_->cfg->tracing.exporter.on())) {
    spans_.decision = span_marks::verdict::none;
    spans_.asked = spans_.decided = {};
    spans_.tries.clear();
  }
  if ((ctx_.access && ctx_.access->enabled()) || spans_.on) started_ = clock::now();
  bytes_in_ = bytes_out_ = 0;
  grpc_status_ = -1;  // (the access log resets it; without one, the metrics and spans read it)
  upstream_ms_ = -1;
  delayed_ms_ = 0;
  limits_.headers.clear();
  limits_.asked = false;
  limits_.refusal = 0;
  early_answer_ = false;
  // (an HTTP/2 stream's exchange lives for one request: the text is the connection's)
  if (peer_key_rt_ != rt_) peer_key_ = rt_->client_ip.key_of(down_.peer(), down_.peer_str()), peer_key_rt_ = rt_;
  admit(*rt_, down_.request(), down_.keep_alive(), {down_.peer(), down_.peer_str(), peer_key_}, ad_);
  spans_.sampled = spans_.on && ad_.traceparent.size() == 55 && sampled_of(ad_.traceparent);
  return scope(*this);
}

template <class Down>
limit::status exchange<Down>::decide(limit::decision_source& source) {
  return ad_.status ? limit::status::ok : ask_limits(source);
}

template <class Down>
limit::status exchange<Down>::decided(limit::decision_source& source, error_code ec) {
  return source.finish(limits_, ec);
}

// A local answer (admission's), the refusal of a limit, or the request forwarded. (Not
// a coroutine: the answer's frame is the only one.)
template <class Down>
asio::awaitable<outcome> exchange<Down>::respond(limit::status st) {
  if (st == limit::status::ok && limits_.refusal) st = limit::status::refused;
  if (spans_.on && limits_.asked) spans_.decided = clock::now(), spans_.decision = span_marks::verdict::allowed;
  if (ad_.status) return answer(ad_.status, ad_.keep_alive, ad_.body);
  if (st != limit::status::ok) return refuse(st);
  return forward_in_turn();
}

template <class Down>
asio::awaitable<outcome> exchange<Down>::answer(unsigned status, bool keep_alive, std::string_view body,
                                                std::string_view extra, std::string_view content_type) {
  // A gRPC call is answered as gRPC: HTTP 200 with a grpc-status (trailers-only), the
  // rate-limit fields kept as metadata; the access log keeps the status it stands for.
  if (status >= 400 && grpc_request()) {
    const bool denied = std::exchange(denial_, false) && limits_.route;
    const unsigned code = deadline_passed_ ? 4 : denied ? limits_.route->response.grpc_status : grpc_status_of(status);
    grpc_status_ = static_cast<int>(code);
    grpc_extra_.assign(extra);
    grpc_extra_.append("grpc-status: ").append(std::to_string(code)).append("\r\ngrpc-message: ");
    grpc_extra_.append(deadline_passed_ ? "deadline exceeded" : grpc_message_of(status)).append("\r\n");
    log_request(status);
    return down_.send_local(200, keep_alive, {}, grpc_extra_, "application/grpc");
  }
  log_request(status);
  denial_ = false;
  return down_.send_local(status, keep_alive, body, extra, content_type);
}

template <class Down>
bool exchange<Down>::grpc_request() const {
  const auto ct = down_.request()[bhttp::field::content_type];
  // (application/grpc, application/grpc+proto; not grpc-web, which is framed otherwise)
  return ct.starts_with("application/grpc") && (ct.size() == 16 || ct[16] == '+' || ct[16] == ';');
}

template <class Down>
void exchange<Down>::release_memory() {
  rp_.release();
  give_back_body_buf();
  std::string().swap(head_out_);
  ad_.release_memory();
  limits_.release_memory();
  checks_cache_.release_memory();
  std::vector<span_try>().swap(spans_.tries);
}

template <class Down>
void exchange<Down>::log_request(unsigned status) {
  if (ctx_.metrics) {
    const auto slot =
        ad_.route >= 0 ? rt_->cfg->routes[static_cast<std::size_t>(ad_.route)].slot : obs::metrics_layout::none;
    ctx_.metrics->request(slot, status);
    if (grpc_status_ >= 0) ctx_.metrics->grpc_call(slot, grpc_status_);
  }
  if (spans_.on) export_span(status);
  auto* log = ctx_.access.get();
  if (!log || !log->enabled()) return;
  const auto& req = down_.request();
  obs::access_record r;
  r.client_ip = ad_.client.who.key.empty() ? down_.peer_str() : std::string_view(ad_.client.who.key);
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
  r.protocol = down_.protocol();
  if (!ad_.traceparent.empty()) r.trace_id = trace_id_of(ad_.traceparent);
  r.grpc_status = std::exchange(grpc_status_, -1);
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
template <class Down>
limit::request_parts exchange<Down>::key_parts() const {
  const auto& req = down_.request();
  limit::request_parts parts;
  parts.client = ad_.client.who.key;
  parts.client_cert = down_.client_cert();
  std::string_view target = req.target();
  if (auto q = target.find('?'); q != std::string_view::npos) parts.query = target.substr(q + 1);
  parts.header = &lookup_header;
  parts.header_ctx = static_cast<const bhttp::fields*>(&req);
  parts.body_length = ad_.framing.type == body_framing::kind::length ? ad_.framing.length : 0;
  parts.chunked = ad_.framing.type == body_framing::kind::chunked;
  return parts;
}

template <class Down>
limit::status exchange<Down>::ask_limits(limit::decision_source& source) {
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
  if (spans_.on) spans_.asked = clock::now();
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
template <class Down>
asio::awaitable<outcome> exchange<Down>::refuse(limit::status st) {
  const auto& route = *limits_.route;
  auto& body = limits_.body;
  body.clear();
  using verdict = span_marks::verdict;
  spans_.decision = st == limit::status::over_limit ? verdict::denied
                    : st == limit::status::refused  ? verdict::refused
                                                    : verdict::unavailable;
  if (st == limit::status::over_limit) {
    denial_ = true;
    limit::append_denial_body(body, route, limits_.checks, limits_.decisions);
    co_return co_await answer(route.response.status, keeps_after_refusal(), body, limits_.headers,
                              limit::content_type(route.response));
  }
  if (st == limit::status::refused) {
    limit::append_refusal_body(body, route, limits_.refusal);
    co_return co_await answer(limits_.refusal, keeps_after_refusal(), body,
                              limits_.refusal == 401 ? "WWW-Authenticate: Key realm=\"floodgate\"\r\n" : "",
                              "application/problem+json");
  }
  limit::append_unavailable_body(body, route);
  co_return co_await answer(503, keeps_after_refusal(), body, "Retry-After: 1\r\n", limit::content_type(route.response));
}

// A request its limits allowed, to be refused after all: some of its decisions turned
// into denials since; their rate-limit fields anew (as refuse() sends them).
template <class Down>
void exchange<Down>::restate_denials() {
  limits_.headers.clear();
  limit::append_rate_headers(limits_.headers, limits_.route->response.headers, limits_.checks, limits_.decisions,
                             true);
}

// A chunked body cut where it passed what its byte quotas had left (cost: body_bytes),
// `bytes` read: those limits' refusal, with Retry-After at their reset. The connection
// then closes (the rest of the body is unread). (Not a coroutine: refuse()'s frame is
// the only one.)
template <class Down>
asio::awaitable<outcome> exchange<Down>::refuse_over_quota(std::uint64_t bytes) {
  limit::deny_over_body_quota(limits_, bytes);
  restate_denials();
  return refuse(limit::status::over_limit);
}

// The costs known once the upstream answered (`res`; null when the exchange failed
// before a response), charged to the limits that decided the request: a response
// header's number (charge: response_header:<Name>), and the rest of a chunked body
// counted by bytes (cost: body_bytes took 1 up front), read whether or not an answer
// came. Each limit takes at most its whole quota from one request.
template <class Down>
void exchange<Down>::charge_after(const response_head* res) {
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
template <class Down>
asio::awaitable<outcome> exchange<Down>::forward_in_turn() {
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
  spans_.decision = span_marks::verdict::delayed;
  ++ctx_.delayed;
  const bool gone = co_await down_.wait_turn(std::chrono::milliseconds(wait));
  --ctx_.delayed;
  if (gone) {
    log_request(499);
    co_return outcome::closed;
  }
  co_return co_await forward();
}

}  // namespace fg::http::detail
