#include "http/session.hpp"
#include "http/session_impl.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/url/parse.hpp>
#include <spdlog/spdlog.h>

#include <array>
#include <algorithm>
#include <charconv>
#include <optional>

#include "http/forwarder.hpp"
#include "http/framing.hpp"
#include "http/responses.hpp"
#include "http/tunnel.hpp"
#include "limit/memory_store.hpp"
#include "limit/redis_store.hpp"
#include "obs/access_log.hpp"
#include "upstream/pool.hpp"
#include "upstream/send_batch.hpp"
#include "util/text.hpp"

// The aliases (asio, beast, bhttp, tcp, error_code, clock) come from session_impl.hpp.
namespace fg::http::detail {

constexpr auto use_tuple = asio::as_tuple(asio::deferred);

namespace {

bool is_idempotent(bhttp::verb v) {
  switch (v) {
    case bhttp::verb::get: case bhttp::verb::head: case bhttp::verb::options:
    case bhttp::verb::trace: case bhttp::verb::put: case bhttp::verb::delete_:
      return true;
    default:
      return false;
  }
}

// Chunk framing for a piece of body: "<hex>\r\n" ... "\r\n".
struct chunk_frame {
  char head[20];
  std::size_t head_len = 0;
  explicit chunk_frame(std::size_t n) {
    auto [p, ec] = std::to_chars(head, head + 16, n, 16);
    p[0] = '\r', p[1] = '\n';
    head_len = static_cast<std::size_t>(p - head) + 2;
  }
};
constexpr std::string_view crlf = "\r\n";
constexpr std::string_view last_chunk = "0\r\n\r\n";

// What a buffer holds, as text.
std::string_view bytes_of(const beast::flat_buffer& b) {
  return {static_cast<const char*>(b.data().data()), b.size()};
}

// A chunked body's framing is followed from its first byte: those already buffered
// behind the head first (false if they are malformed), then each read's (read_into).
bool start_vetting(chunk_vetter& v, const beast::flat_buffer& buffered) {
  v.reset();
  return v.feed(bytes_of(buffered)) != chunk_vetter::state::bad;
}

// Maps a cancelled wait whose deadline passed to a timeout.
error_code timed(const app::session_entry& e, error_code ec) {
  return ec && e.expired ? error_code(beast::error::timeout) : ec;
}

// Feeds already-buffered bytes to a parser, reading from the socket only when the
// parser needs more. Body mode (`want_head` false, buffer_body): returns when some
// body bytes were produced, the body buffer is full, or the message is complete.
// Head mode: returns when the head is parsed.
// Feeds buffered bytes to the parser without suspending. A result when done, nullopt
// when the parser needs bytes from the socket.
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

// With `vet`, each byte read is also followed through a chunked body's framing as it
// arrives, so a malformed one fails at once instead of when the parser gives up.
template <class Parser>
asio::awaitable<error_code> read_into(app::session_entry& e, tcp::socket& s, beast::flat_buffer& b, Parser& p,
                                      std::chrono::milliseconds timeout, std::size_t& produced, bool want_head,
                                      chunk_vetter* vet = nullptr) {
  std::size_t start = want_head ? 0 : p.get().body().size;
  produced = 0;
  for (;;) {
    if (auto r = feed(b, p, start, produced, want_head)) co_return *r;
    e.arm(timeout);
    auto space = std::min<std::size_t>(b.max_size() - b.size(), 65536);
    auto [ec, n] = co_await s.async_read_some(b.prepare(space), use_tuple);
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

}  // namespace


asio::awaitable<session::outcome> session::read_head(bool first) {
  const auto& http = rt_->cfg->http;
  const auto max = http.max_header_bytes;
  scanner_.reset();
  auto deadline = first ? app::deadline_after(http.header_timeout) : clock::time_point::max();
  for (;;) {
    // Tolerate empty lines between pipelined requests (RFC 9112 §2.2).
    while (buffer_.size() >= 2 && static_cast<const char*>(buffer_.data().data())[0] == '\r' &&
           static_cast<const char*>(buffer_.data().data())[1] == '\n')
      buffer_.consume(2);
    if (buffer_.size() > 0) {
      entry_->idle = false;
      if (deadline == clock::time_point::max()) deadline = app::deadline_after(http.header_timeout);
      auto data = bytes_of(buffer_).substr(0, max + 1);
      auto st = scanner_.scan(data);
      if (st == head_scanner::state::complete) {
        if (scanner_.head_size() > max) co_return co_await send_local(431, false);
        break;
      }
      if (st == head_scanner::state::bad) {
        spdlog::debug("{}: rejected request: {}", peer_str_, scanner_.error());
        co_return co_await send_local(400, false);
      }
      if (buffer_.size() > max) co_return co_await send_local(431, false);
    } else {
      entry_->idle = true;
      if (ctx_.draining) {
        entry_->lean_at = clock::time_point::max();
        co_return outcome::close;
      }
    }
    entry_->arm_at(deadline == clock::time_point::max() ? app::deadline_after(http.idle_timeout) : deadline);
    if (entry_->lean) {
      // Idle for a while: wait for bytes with no buffer at all.
      release_idle_memory();
      auto [wec] = co_await socket_.async_wait(tcp::socket::wait_read, use_tuple);
      entry_->lean = false;
      if (wec && entry_->expired) {
        entry_->idle = false;  // the sweeper must not take back the answer's write
        if (!first) co_return outcome::close;
        co_return co_await send_local(408, false);
      }
      if (wec) co_return outcome::closed;
    }
    if (buffer_.size() == 0) entry_->lean_at = app::deadline_after(app::lean_after);
    // A head usually fits in 4 KiB: reads grow past that only for larger ones.
    auto space = std::min<std::size_t>(buffer_.max_size() - buffer_.size(), buffer_.size() ? 16384 : 4096);
    auto [ec, n] = co_await socket_.async_read_some(buffer_.prepare(space), use_tuple);
    // The sweeper took back an idle read to wait without its buffer: between requests the
    // connection is parked (no session at all), a new one waits here with nothing held.
    if (ec == asio::error::operation_aborted && entry_->lean && !entry_->expired && !ctx_.draining) {
      if (!first && buffer_.size() == 0) co_return outcome::park;
      continue;
    }
    entry_->lean = false;
    entry_->lean_at = clock::time_point::max();
    if (ec && entry_->expired) {
      // An idle keep-alive connection just closes; a slow or silent request head gets 408.
      if (buffer_.size() == 0 && !first) co_return outcome::close;
      co_return co_await send_local(408, false);
    }
    if (ec) co_return outcome::closed;
    buffer_.commit(n);
  }
  // Beast parses the head we have vetted.
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(max + 4));
  parser_->body_limit(boost::none);
  parser_->eager(false);
  error_code ec;
  auto used = parser_->put(asio::buffer(buffer_.data().data(), scanner_.head_size()), ec);
  if (ec || !parser_->is_header_done()) {
    spdlog::debug("{}: rejected request: {}", peer_str_, ec ? ec.message() : "incomplete head");
    co_return co_await send_local(400, false);
  }
  buffer_.consume(used);
  parser_->eager(true);
  entry_->idle = false;
  co_return outcome::keep_going;
}

asio::awaitable<bool> session::run() {
  for (;;) {
    rt_ = ctx_.rt;
    bool first = requests_ == 0;
    auto o = co_await read_head(first);
    if (o == outcome::park) co_return true;
    if (o != outcome::keep_going) {
      if (o == outcome::close) co_await lingering_close();
      break;
    }
    ++requests_;
    if (ctx_.access && ctx_.access->enabled()) started_ = clock::now();
    bytes_in_ = bytes_out_ = 0;
    upstream_ms_ = -1;
    route_ = -1;
    o = co_await handle();
    give_back_body_buf();
    if (o == outcome::close) {
      co_await lingering_close();
      break;
    }
    if (o == outcome::closed) break;
  }
  error_code ec;
  socket_.close(ec);
  co_return false;
}

void session::release_idle_memory() {
  buffer_.shrink_to_fit();  // empty: gives the storage back
  parser_.release();
  rp_.release();
  give_back_body_buf();
  for (auto* s : {&head_out_, &request_id_, &path_, &client_key_, &xff_, &forwarded_, &client_ip_text_, &abs_host_,
                  &abs_target_, &rate_headers_, &nonce_})
    std::string().swap(*s);
  who_ = {};
  std::vector<net::header_field>().swap(ip_fields_);
  std::vector<limit::check>().swap(checks_);
  std::vector<limit::decision>().swap(decisions_);
}

asio::awaitable<void> session::lingering_close() {
  // Half-close, then drain what the client is still sending so that our response is
  // not destroyed by a reset; bounded in time and bytes.
  error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) co_return;
  auto until = clock::now() + std::chrono::seconds(2);
  std::size_t total = 0;
  char sink[4096];
  while (total < 4 * 1024 * 1024) {
    entry_->arm_at(until);
    auto [rec, n] = co_await socket_.async_read_some(asio::buffer(sink), use_tuple);
    if (rec) break;
    total += n;
  }
}

auto session::write_down(std::span<const asio::const_buffer> bufs) {
  entry_->arm(rt_->cfg->http.idle_timeout);
  return asio::async_write(socket_, bufs, use_tuple);
}

auto session::write_up(upstream::connection& up, std::span<const asio::const_buffer> bufs,
                       std::chrono::milliseconds timeout) {
  entry_->arm(timeout);
  return asio::async_initiate<decltype(use_tuple), void(error_code, std::size_t)>(
      [&up, bufs](auto handler) {
        // Resumed with a batch from Redis: the batch's writes go out together.
        if (auto* batch = upstream::send_batch::current()) batch->add(up.socket, bufs, std::move(handler));
        else asio::async_write(up.socket, bufs, std::move(handler));
      },
      use_tuple);
}

asio::awaitable<session::outcome> session::send_local(unsigned status, bool keep_alive, std::string_view body,
                                                     std::string_view extra, std::string_view content_type) {
  bool head = parser_ && parser_->is_header_done() && parser_->get().method() == bhttp::verb::head;
  keep_alive = keep_alive && !ctx_.draining;
  local_response r;
  r.status = status;
  r.body = body;
  r.keep_alive = keep_alive;
  r.request_id = request_id_;
  r.head = head;
  r.extra = extra;
  if (!content_type.empty()) r.content_type = content_type;
  auto text = render(r);
  if (parser_ && parser_->is_header_done()) log_request(status);
  else if (requests_ == 0 || buffer_.size()) {
    // Rejected before a request head was parsed: still one access-log line.
    started_ = clock::now();
    auto* log = ctx_.access.get();
    if (log && log->enabled())
      log->write({peer_str_, "-", "-", status, 0, 0, -1, 0, request_id_, ""});
  }
  std::array<asio::const_buffer, 1> bufs{asio::buffer(text)};
  auto [ec, n] = co_await write_down(bufs);
  if (timed(*entry_, ec)) co_return outcome::closed;
  co_return keep_alive ? outcome::keep_going : outcome::close;
}

void session::log_request(unsigned status) {
  auto* log = ctx_.access.get();
  if (!log || !log->enabled()) return;
  const auto& req = parser_->get();
  obs::access_record r;
  r.client_ip = client_key_.empty() ? std::string_view(peer_str_) : std::string_view(client_key_);
  r.method = req.method_string();
  r.target = req.target();
  r.status = status;
  r.bytes_in = bytes_in_;
  r.bytes_out = bytes_out_;
  r.upstream_ms = upstream_ms_;
  r.total_ms = std::chrono::duration<double, std::milli>(clock::now() - started_).count();
  r.request_id = request_id_;
  if (route_ >= 0) r.route = rt_->cfg->routes[static_cast<std::size_t>(route_)].name;
  log->write(r);
}

bool session::interpreted_underscore(const bhttp::request_header<>& req) const {
  for (const auto& f : req) {
    auto name = f.name_string();
    if (f.name() != bhttp::field::unknown || name.find('_') == std::string_view::npos) continue;
    // A configured identity header may itself be spelled with '_' (HTTP_CLIENT_IP).
    if (std::any_of(rt_->identity_fields.begin(), rt_->identity_fields.end(),
                    [&](const auto& h) { return beast::iequals(name, h); }))
      continue;
    for (const auto& h : rt_->interpreted)
      if (util::iequals_folded(name, h)) {
        spdlog::debug("{}: rejected request: header '{}' reads as {} with '_' for '-'", peer_str_, name, h);
        return true;
      }
  }
  return false;
}

session::verdict session::prepare(std::string_view& expect, bool& has_expect) {
  const auto& req = parser_->get();
  const auto& cfg = *rt_->cfg;
  request_id_.clear();
  client_key_.clear();
  // One pass over the fields for what this function needs (each find() is a tree walk).
  std::string_view host, incoming_id;
  bool has_host = false, underscore = false;
  has_upgrade_ = false;
  for (const auto& f : req) {
    switch (f.name()) {
      case bhttp::field::host: host = f.value(), has_host = true; break;
      case bhttp::field::expect: expect = f.value(), has_expect = true; break;
      case bhttp::field::upgrade: has_upgrade_ = true; break;
      case bhttp::field::unknown:
        if (incoming_id.empty() && beast::iequals(f.name_string(), "x-request-id"))
          incoming_id = usable_request_id(f.value());
        underscore = underscore || f.name_string().find('_') != std::string_view::npos;
        break;
      default: break;
    }
  }
  if (!incoming_id.empty()) request_id_.assign(incoming_id);
  else make_request_id(request_id_);

  const char* why = "";
  auto framing = check_request_framing(req.base(), why);
  if (!framing) {
    spdlog::debug("{}: rejected request: {}", peer_str_, why);
    return {400, false, {}};
  }
  framing_ = *framing;
  if (has_host && !valid_host(host)) {
    spdlog::debug("{}: rejected request: invalid Host", peer_str_);
    return {400, false, {}};
  }
  if (underscore && interpreted_underscore(req.base())) return {400, false, {}};
  bool has_body = framing_.type != body_framing::kind::none;
  if (!routing::normalize_target_path(req.target(), path_)) return {400, false, {}};
  if (cfg.http.max_body_bytes && framing_.type == body_framing::kind::length && framing_.length > cfg.http.max_body_bytes)
    return {413, false, {}};

  // Absolute-form ("GET http://host/x"): its authority is the host (RFC 9112 §3.2.2),
  // and upstream gets origin-form with a Host to match, so both see one host.
  abs_host_.clear();
  abs_target_.clear();
  if (req.target().front() != '/') {
    auto u = boost::urls::parse_absolute_uri(req.target());
    if (!u || u->encoded_host().empty() || u->has_userinfo() || !valid_host(u->encoded_host_and_port()))
      return {400, false, {}};
    abs_host_.assign(u->encoded_host_and_port().data(), u->encoded_host_and_port().size());
    abs_target_.assign(u->encoded_target().data(), u->encoded_target().size());
    if (abs_target_.empty() || abs_target_.front() != '/') abs_target_.insert(0, "/");
    host = abs_host_;
  }
  route_ = rt_->routes.match(host, req.method_string(), path_);
  if (route_ < 0) return {404, parser_->keep_alive() && !has_body, "{\"error\":\"no route\"}\n"};

  // Identity: the peer unless it is a trusted proxy (then its forwarding headers).
  peer_trusted_ = rt_->client_ip.is_trusted(peer_);
  if (peer_trusted_) {
    // All of them (the head's size bounds them): the last ones are what our proxy wrote,
    // and a cap keeping the first would let a client push those out of sight.
    auto& fields = ip_fields_;
    fields.clear();
    for (const auto& f : req) {
      for (const auto& name : rt_->identity_fields)
        if (beast::iequals(f.name_string(), name)) {
          fields.push_back({f.name_string(), f.value()});
          break;
        }
    }
    who_ = rt_->client_ip.resolve(peer_, fields);
    client_key_ = who_.key;
  } else {
    // The peer's key depends on the config (ipv6_prefix): cached per snapshot.
    if (peer_key_rt_ != rt_) peer_key_ = rt_->client_ip.key_of(peer_), peer_key_rt_ = rt_;
    client_key_ = peer_key_;
  }

  return {};
}

asio::awaitable<session::outcome> session::handle() {
  std::string_view expect;
  bool has_expect = false;
  auto v = prepare(expect, has_expect);
  if (v.status) co_return co_await send_local(v.status, v.keep_alive, v.body);
  const auto& req = parser_->get();
  const auto& route = rt_->cfg->routes[static_cast<std::size_t>(route_)];
  const bool has_body = framing_.type != body_framing::kind::none;
  rate_headers_.clear();
  if (!route.limits.empty()) {
    auto step = begin_limits(route);
    if (step == limits_step::ask_redis) {
      auto [ec] = co_await ctx_.batcher->evaluate(checks_, nonce_, decisions_);
      step = end_limits(route, ec);
    }
    if (step == limits_step::limited) co_return co_await send_limited(route, rate_headers_);
    if (step == limits_step::unavailable) co_return co_await send_store_unavailable();
  }

  if (has_expect) {
    if (!beast::iequals(expect, "100-continue")) co_return co_await send_local(417, false);
    if (has_body && req.version() >= 11) {
      static constexpr std::string_view cont = "HTTP/1.1 100 Continue\r\n\r\n";
      std::array<asio::const_buffer, 1> bufs{asio::buffer(cont)};
      auto [ec, n] = co_await write_down(bufs);
      if (timed(*entry_, ec)) co_return outcome::closed;
    }
  }
  auto o = co_await forward();
  release_leases();
  co_return o;
}

asio::awaitable<session::outcome> session::forward() {
  auto& req = parser_->get();
  const auto& cfg = *rt_->cfg;
  const auto& route = cfg.routes[static_cast<std::size_t>(route_)];
  const auto& up_cfg = cfg.upstreams[route.upstream_index];
  const bool has_body = framing_.type != body_framing::kind::none;
  const bool chunked = framing_.type == body_framing::kind::chunked;
  const bool upgrade = has_upgrade_ && !has_body && is_upgrade_request(req.base());
  const bool retry_safe = is_idempotent(req.method()) && !has_body;

  head_out_.clear();
  forward_context fc;
  fc.peer_ip = peer_str_;
  fc.peer_trusted = peer_trusted_;
  fc.request_id = request_id_;
  fc.upgrade = upgrade;
  fc.framing = framing_;
  fc.target = abs_target_;
  fc.host = abs_host_;
  fc.default_host = rt_->upstream_hosts[route.upstream_index];
  const bool full_chain = cfg.client_ip.forward_chain == config::client_ip_config::chain::full;
  if (peer_trusted_) {
    rt_->client_ip.forwarding(peer_, peer_str_, ip_fields_, who_, full_chain, xff_,
                              forwarded_);
    fc.xff = xff_;
    fc.forwarded = forwarded_;
    if (who_.from_header) client_ip_text_ = who_.ip.to_string();
  }
  fc.client_header = cfg.client_ip.forward;
  fc.client_ip = peer_trusted_ && who_.from_header ? std::string_view(client_ip_text_) : std::string_view(peer_str_);
  if (!peer_trusted_) fc.drop = rt_->untrusted_drop;
  else if (!full_chain) fc.drop = rt_->identity_fields;
  build_upstream_request(req.base(), fc, head_out_);

  // The first piece of the body is read before upstream is contacted: a malformed
  // body is rejected with upstream having received nothing.
  std::size_t piece = 0;
  char* buf = nullptr;
  chunk_vetter* vet = chunked ? &vetter_ : nullptr;
  if (vet && !start_vetting(vetter_, buffer_)) {
    spdlog::debug("{}: rejected request: {}", peer_str_, vetter_.error());
    co_return co_await send_local(400, false);
  }
  if (has_body) {
    buf = body_buf();
    req.body().data = buf;
    req.body().size = body_chunk;
    auto ec = co_await read_into(*entry_, socket_, buffer_, *parser_, cfg.http.idle_timeout, piece, false, vet);
    if (ec == beast::error::timeout) co_return co_await send_local(408, false);
    if (ec) co_return co_await send_local(400, false);
  }
  auto body_too_large = [&] { return cfg.http.max_body_bytes && bytes_in_ > cfg.http.max_body_bytes; };

  const bool timing = ctx_.access && ctx_.access->enabled();
  auto t0 = timing ? clock::now() : clock::time_point{};
  upstream::connection_ptr up;
  // Declared after `up`, so destroyed before it: the sweeper never sees a freed socket.
  struct forget_upstream {
    app::session_entry& e;
    ~forget_upstream() { e.upstream = nullptr; }
  } forget{*entry_};
  for (int attempt = 0;; ++attempt) {
    error_code ec;
    // (GCC 12: no co_await inside a conditional expression.)
    if (attempt == 0) up = ctx_.pool->take_idle(route.upstream_index, *entry_);
    if (!up) up = co_await ctx_.pool->connect(route.upstream_index, *entry_, ec);
    if (!up) {
      spdlog::warn("upstream {} ({}): connect failed: {}", up_cfg.name, up_cfg.address.str(), ec.message());
      co_return co_await send_local(502, false);
    }
    // Head and first body piece in one write.
    chunk_frame frame(piece);
    std::array<asio::const_buffer, 4> bufs;
    std::size_t nb = 0;
    bufs[nb++] = asio::buffer(head_out_);
    if (piece) {
      if (chunked) bufs[nb++] = asio::buffer(frame.head, frame.head_len);
      bufs[nb++] = asio::buffer(buf, piece);
      if (chunked) bufs[nb++] = asio::buffer(crlf);
    }
    auto [wec0, wn] = co_await write_up(*up, std::span(bufs.data(), nb), up_cfg.response_timeout);
    auto wec = timed(*entry_, wec0);
    if (!wec) break;
    if (up->reused && retry_safe && attempt == 0) continue;
    spdlog::warn("upstream {}: write failed: {}", up_cfg.name, wec.message());
    co_return co_await send_local(502, false);
  }
  bytes_in_ += piece;

  // Rest of the request body.
  while (has_body && !parser_->is_done()) {
    if (body_too_large()) co_return co_await send_local(413, false);
    req.body().data = buf;
    req.body().size = body_chunk;
    auto ec = co_await read_into(*entry_, socket_, buffer_, *parser_, cfg.http.idle_timeout, piece, false, vet);
    if (ec) {
      spdlog::debug("{}: request body aborted: {}", peer_str_, ec.message());
      // Upstream sees an incomplete message and a closed connection, never a second one.
      co_return co_await send_local(ec == beast::error::timeout ? 408 : 400, false);
    }
    if (!piece) continue;
    bytes_in_ += piece;
    chunk_frame frame(piece);
    std::array<asio::const_buffer, 3> bufs;
    std::size_t nb = 0;
    if (chunked) bufs[nb++] = asio::buffer(frame.head, frame.head_len);
    bufs[nb++] = asio::buffer(buf, piece);
    if (chunked) bufs[nb++] = asio::buffer(crlf);
    auto [wec, wn] = co_await write_up(*up, std::span(bufs.data(), nb), up_cfg.response_timeout);
    if (timed(*entry_, wec)) {
      spdlog::warn("upstream {}: write failed: {}", up_cfg.name, wec.message());
      co_return co_await send_local(502, false);
    }
  }
  if (body_too_large()) co_return co_await send_local(413, false);
  if (chunked) {
    std::array<asio::const_buffer, 1> bufs{asio::buffer(last_chunk)};
    auto [wec, wn] = co_await write_up(*up, bufs, up_cfg.response_timeout);
    if (timed(*entry_, wec)) co_return co_await send_local(502, false);
  }

  // Response head; 1xx other than 101 are consumed here.
  // The parser lives in the session, not in this coroutine's frame: Asio recycles
  // frames only up to ~1 KiB, a larger frame costs a malloc per request.
  auto& rp = rp_;
  for (int attempt = 0;;) {
    rp.emplace();
    rp->header_limit(64 * 1024);
    rp->body_limit(boost::none);
    if (req.method() == bhttp::verb::head) rp->skip(true);
    std::size_t unused = 0;
    auto ec = co_await read_into(*entry_, up->socket, up->buffer, *rp, up_cfg.response_timeout, unused, true);
    if (!ec) {
      auto code = rp->get().result_int();
      if (code >= 100 && code < 200 && code != 101) continue;
      break;
    }
    if (ec == beast::error::timeout) {
      spdlog::warn("upstream {}: no response within {}ms", up_cfg.name, up_cfg.response_timeout.count());
      co_return co_await send_local(504, false);
    }
    bool nothing_received = ec == bhttp::error::end_of_stream || ec == asio::error::connection_reset ||
                            ec == asio::error::eof;
    if (up->reused && retry_safe && attempt == 0 && nothing_received) {
      ++attempt;
      error_code cec;
      up = co_await ctx_.pool->connect(route.upstream_index, *entry_, cec);
      if (!up) co_return co_await send_local(502, false);
      std::array<asio::const_buffer, 1> bufs{asio::buffer(head_out_)};
      auto [wec, wn] = co_await write_up(*up, bufs, up_cfg.response_timeout);
      if (timed(*entry_, wec)) co_return co_await send_local(502, false);
      continue;
    }
    spdlog::warn("upstream {}: bad or missing response: {}", up_cfg.name, ec.message());
    co_return co_await send_local(502, false);
  }
  auto& res = rp->get();
  unsigned status = res.result_int();
  // An upstream's chunked framing is followed as it arrives too: malformed, it is a
  // 502 (or a cut connection) at once, not a wait for the response timeout.
  const bool up_chunked_body =
      rp->chunked() && req.method() != bhttp::verb::head && status != 204 && status != 304 && status != 101;
  chunk_vetter* up_vet = up_chunked_body ? &vetter_ : nullptr;
  if (up_vet && !start_vetting(vetter_, up->buffer)) {
    spdlog::warn("upstream {}: bad chunked response: {}", up_cfg.name, vetter_.error());
    co_return co_await send_local(502, false);
  }

  response_context rc;
  rc.client_version = req.version();
  rc.keep_alive = parser_->keep_alive() && !ctx_.draining;
  bool body_expected = !(req.method() == bhttp::verb::head || status == 204 || status == 304 || status == 101);
  bool up_close_delimited = false;
  if (!body_expected) {
    rc.framing = response_framing::none;
    // A HEAD answer keeps the upstream's Content-Length as information.
    if (req.method() == bhttp::verb::head && rp->content_length()) {
      rc.framing = response_framing::length;
      rc.length = *rp->content_length();
    }
  } else if (rp->chunked()) {
    rc.framing = req.version() >= 11 ? response_framing::chunked : response_framing::close_delimited;
  } else if (rp->content_length()) {
    rc.framing = response_framing::length;
    rc.length = *rp->content_length();
  } else {
    up_close_delimited = true;
    rc.framing = req.version() >= 11 ? response_framing::chunked : response_framing::close_delimited;
  }
  if (rc.framing == response_framing::close_delimited) rc.keep_alive = false;
  const bool tunnel = status == 101 && upgrade;
  rc.upgrade = tunnel;
  // Only a WebSocket upgrade we asked for becomes a tunnel: anything else would carry
  // the connection's later requests past routing and limits.
  if (status == 101 && (!upgrade || !is_websocket_response(res.base()))) {
    spdlog::warn("upstream {}: unexpected 101 to a request that did not ask for a WebSocket upgrade", up_cfg.name);
    co_return co_await send_local(502, false);
  }
  if (tunnel) rc.keep_alive = false;
  rc.extra = rate_headers_;
  head_out_.clear();
  build_downstream_response(res.base(), rc, head_out_);
  if (timing) upstream_ms_ = std::chrono::duration<double, std::milli>(clock::now() - t0).count();

  const bool down_chunked = rc.framing == response_framing::chunked;
  buf = body_buf();
  bool wrote_head = false;
  bool complete = !body_expected;
  while (!complete) {
    res.body().data = buf;
    res.body().size = body_chunk;
    error_code ec;
    piece = 0;
    if (auto r = feed(up->buffer, *rp, body_chunk, piece, false)) ec = *r;
    else ec = co_await read_into(*entry_, up->socket, up->buffer, *rp, up_cfg.response_timeout, piece, false, up_vet);
    if (ec) {
      // Mid-response failure: close without completing the framing, so the client
      // can tell the response is truncated.
      spdlog::warn("upstream {}: response aborted: {}", up_cfg.name, ec.message());
      if (!wrote_head) co_return co_await send_local(ec == beast::error::timeout ? 504 : 502, false);
      log_request(status);
      co_return outcome::closed;
    }
    complete = rp->is_done();
    chunk_frame frame(piece);
    std::array<asio::const_buffer, 5> bufs;
    std::size_t nb = 0;
    if (!wrote_head) bufs[nb++] = asio::buffer(head_out_);
    if (piece) {
      if (down_chunked) bufs[nb++] = asio::buffer(frame.head, frame.head_len);
      bufs[nb++] = asio::buffer(buf, piece);
      if (down_chunked) bufs[nb++] = asio::buffer(crlf);
    }
    if (complete && down_chunked) bufs[nb++] = asio::buffer(last_chunk);
    if (nb == 0) continue;
    auto [dec, dn] = co_await write_down(std::span(bufs.data(), nb));
    if (timed(*entry_, dec)) co_return outcome::closed;
    wrote_head = true;
    bytes_out_ += piece;
  }
  if (!wrote_head) {
    std::array<asio::const_buffer, 1> bufs{asio::buffer(head_out_)};
    auto [dec, dn] = co_await write_down(bufs);
    if (timed(*entry_, dec)) co_return outcome::closed;
  }
  if (!tunnel) log_request(status);

  if (tunnel) {
    // Concurrency leases are held for the tunnel's life, renewed well before they expire.
    std::function<void()> renew;
    auto every = lease_renewal_interval();
    if (every.count() > 0) renew = [this] { renew_leases(); };
    auto stats = co_await run_tunnel(*entry_, socket_, buffer_, up->socket, up->buffer, cfg.http.idle_timeout,
                                     std::move(renew), every);
    bytes_in_ += stats.down_to_up;
    bytes_out_ += stats.up_to_down;
    // One line when the tunnel ends, with the bytes it carried.
    log_request(status);
    co_return outcome::closed;
  }
  entry_->upstream = nullptr;
  if (rp->keep_alive() && !up_close_delimited && !upgrade) ctx_.pool->release(route.upstream_index, std::move(up));
  co_return rc.keep_alive ? outcome::keep_going : outcome::close;
}

}  // namespace fg::http::detail

namespace fg::http {

namespace {

using detail::tcp;
using detail::error_code;

// A keep-alive connection between requests, idle past app::lean_after: its socket, its
// deadline entry, and one wait for readability; no session, frame or buffer. Readable,
// it gets a new session; past idle_timeout or on drain it is closed.
struct parked {
  app::worker_context& ctx;
  tcp::socket socket;
  std::list<app::session_entry>::iterator entry;

  parked(app::worker_context& c, tcp::socket s) : ctx(c), socket(std::move(s)) {
    entry = ctx.sessions.insert(ctx.sessions.end(), app::session_entry{});
    entry->socket = &socket;
    entry->lean = true;  // already lean: the sweeper only watches its deadline
  }
  ~parked() {
    ctx.sessions.erase(entry);
    if (socket.is_open() && ctx.connections) ctx.connections->open.fetch_sub(1, std::memory_order_relaxed);
  }
};

void spawn(app::worker_context& ctx, tcp::socket socket, bool resumed);

void park(app::worker_context& ctx, tcp::socket socket, std::chrono::steady_clock::time_point deadline) {
  auto p = std::make_unique<parked>(ctx, std::move(socket));
  p->entry->arm_at(deadline);
  auto& s = p->socket;
  s.async_wait(tcp::socket::wait_read, [p = std::move(p)](error_code ec) mutable {
    // Timed out, drained or reset: ~parked closes it and gives its count back.
    if (ec || p->entry->expired || p->ctx.draining) return;
    auto& ctx = p->ctx;
    auto socket = std::move(p->socket);
    p.reset();
    spawn(ctx, std::move(socket), true);
  });
}

boost::asio::awaitable<void> serve(app::worker_context& ctx, tcp::socket socket, bool resumed) {
  std::optional<tcp::socket> idle;
  std::chrono::steady_clock::time_point deadline;
  {
    detail::session s(ctx, std::move(socket), resumed);
    // (GCC 12: no co_await inside a condition.)
    const bool to_park = co_await s.run();
    if (to_park) {
      deadline = s.idle_deadline();
      idle.emplace(s.release_socket());
    }
  }
  if (idle) park(ctx, std::move(*idle), deadline);
}

void spawn(app::worker_context& ctx, tcp::socket socket, bool resumed) {
  auto executor = socket.get_executor();
  boost::asio::co_spawn(executor, serve(ctx, std::move(socket), resumed), [](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      spdlog::error("session ended by exception: {}", ex.what());
    }
  });
}

}  // namespace

void start_session(app::worker_context& ctx, boost::asio::ip::tcp::socket socket) {
  spawn(ctx, std::move(socket), false);
}

}  // namespace fg::http
