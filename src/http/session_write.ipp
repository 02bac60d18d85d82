#pragma once
// The session's answers (members of session<Stream>, session_impl.hpp), as HTTP/1.1:
// local answers, a rejected head's, "100 Continue", a response relayed from upstream
// (its head and framing, its body's pieces), a WebSocket upgrade; and the wait of a
// delayed request, which watches for the client going away.
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>

#include "http/forwarder.hpp"
#include "http/response_plan.hpp"
#include "http/responses.hpp"
#include "http/session_impl.hpp"
#include "net/peek.hpp"
#include "obs/access_log.hpp"
#include "obs/metrics.hpp"

namespace fg::http::detail {

template <class Stream>
asio::awaitable<outcome> session<Stream>::send_local(unsigned status, bool keep_alive, std::string_view body,
                                                     std::string_view extra, std::string_view content_type) {
  const bool head = head_parsed_ && parser_->get().method() == bhttp::verb::head;
  keep_alive = keep_alive && !ctx_.draining;
  local_response r;
  r.status = status;
  r.body = body;
  r.keep_alive = keep_alive;
  if (head_parsed_) r.request_id = ex_.request_id();
  r.head = head;
  r.extra = extra;
  if (!content_type.empty()) r.content_type = content_type;
  auto text = render(r);
  std::array<asio::const_buffer, 1> bufs{asio::buffer(text)};
  auto [ec, n] = co_await write(bufs);
  if (timed(conn_.watch(), ec)) co_return outcome::closed;
  co_return keep_alive ? outcome::keep_going : outcome::close;
}

// Counted, with an access-log line of its own (nothing of the connection's last request:
// its head may still be in the parser). (Not a coroutine: send_local's frame is the only one.)
template <class Stream>
asio::awaitable<outcome> session<Stream>::reject(unsigned status) {
  if (requests_ == 0 || conn_.buffer().size()) {
    if (ctx_.metrics) ctx_.metrics->request(obs::metrics_layout::none, status);
    auto* log = ctx_.access.get();
    if (log && log->enabled())
      log->write({peer_str_, "-", "-", status, 0, 0, -1, 0, "", "", "", 0, "HTTP/1.1", "", -1});
  }
  return send_local(status, false);
}

// A client that expects 100-continue is told to go on (an HTTP/1.0 one is not: it
// cannot read it); false when it is gone.
template <class Stream>
asio::awaitable<bool> session<Stream>::send_continue() {
  if (parser_->get().version() < 11) co_return true;
  static constexpr std::string_view cont = "HTTP/1.1 100 Continue\r\n\r\n";
  std::array<asio::const_buffer, 1> bufs{asio::buffer(cont)};
  auto [ec, n] = co_await write(bufs);
  co_return !timed(conn_.watch(), ec);
}

// The head of a response relayed from upstream, as the client gets it: its framing
// there (response_plan.hpp), `extra` (the rate-limit fields) among its fields. False
// when the upstream's Transfer-Encoding cannot be passed on (build_downstream_response).
// `may_keep_alive` false: the connection closes after it (the upstream answered before
// the request's body was all read).
template <class Stream>
bool session<Stream>::begin_response(response_parser& rp, std::string_view extra, bool may_keep_alive,
                                     response_start& out) {
  auto plan = plan_response(parser_->get().base(), parser_->keep_alive() && may_keep_alive, rp, ctx_.draining);
  out.body_expected = plan.body_expected;
  out.up_close_delimited = plan.up_close_delimited;
  out.keep_alive = plan.rc.keep_alive;
  down_chunked_ = plan.rc.framing == response_framing::chunked;
  length_framed_ = plan.rc.framing == response_framing::length;
  inline_ = false;
  plan.rc.extra = extra;
  head_out_.clear();
  const bool framed = build_downstream_response(rp.get(), plan.rc, head_out_);
  head_len_ = head_out_.size();
  return framed;
}

// Room for a body of `n` bytes right behind the head (Content-Length framed only): the
// head and the body then go down as one buffer.
template <class Stream>
char* session<Stream>::inline_room(std::size_t n) {
  if (!length_framed_) return nullptr;
  inline_ = true;
  head_out_.resize(head_len_ + n);
  return head_out_.data() + head_len_;
}

// The buffers of one write of the response: the head when `head_too`, then `n` bytes
// of `data` in the response's framing (the last chunk with the last piece).
template <class Stream>
std::span<const asio::const_buffer> session<Stream>::response_piece(bool head_too, const char* data, std::size_t n,
                                                                    bool last) {
  if (inline_ && head_too) return writes_.assign(std::string_view(head_out_.data(), head_len_ + n), nullptr, 0, false, false);
  const std::string_view head(head_out_.data(), head_too ? head_len_ : 0);
  return writes_.assign(head, data, n, down_chunked_, last && down_chunked_);
}

// A WebSocket upgrade the upstream accepted: the 101 goes down (false: the client is
// gone), then both ways are carried as bytes until either side ends (run_tunnel).
template <class Stream>
asio::awaitable<bool> session<Stream>::upgrade(upstream::connection& up, response_parser& rp, std::string_view extra,
                                               std::function<void()> renew, std::chrono::milliseconds every,
                                               tunnel_stats& stats) {
  auto plan = plan_response(parser_->get().base(), parser_->keep_alive(), rp, ctx_.draining);
  plan.rc.upgrade = true;
  plan.rc.keep_alive = false;
  plan.rc.extra = extra;
  head_out_.clear();
  build_downstream_response(rp.get(), plan.rc, head_out_);
  std::array<asio::const_buffer, 1> bufs{asio::buffer(head_out_)};
  auto [dec, dn] = co_await write(bufs);
  if (timed(conn_.watch(), dec)) co_return false;
  if constexpr (is_socket<Stream> || is_tls<Stream>)
    stats = co_await run_tunnel(conn_.watch(), conn_.stream(), conn_.buffer(), up, up.buffer,
                                ex_.rt().cfg->http.idle_timeout, std::move(renew), every);
  co_return true;
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
