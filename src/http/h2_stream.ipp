#pragma once
// An HTTP/2 stream (members of h2_stream<Stream>, h2_connection.hpp): its request head
// as nghttp2 decodes it, its body as DATA brings it, and its answers as the exchange
// gives them, sent as nghttp2 takes them (the client's window permitting).
#include <spdlog/spdlog.h>

#include <cstring>

#include "http/forwarder.hpp"
#include "http/h2_connection.hpp"
#include "http/response_plan.hpp"
#include "http/responses.hpp"

namespace fg::http::detail {

template <class Stream>
h2_stream<Stream>::h2_stream(conn_type& conn, std::int32_t id)
    : conn_(conn), id_(id), wake_(conn.conn_.stream().get_executor(), clock::time_point::max()), watch_(conn.ctx_.deadlines.open(nullptr)),
      ex_(conn.ctx_, *this) {
  ex_.use_current();
  watch_->set_busy();
  watch_->on_expire(&h2_stream::expired, this);
  // The head is bounded as a whole (its fields arrive in one block).
  watch_->arm(conn.ctx_.rt->cfg->http.header_timeout);
  req_.version(11);
}

template <class Stream>
const net::address& h2_stream<Stream>::peer() const {
  return conn_.peer_;
}
template <class Stream>
std::string_view h2_stream<Stream>::peer_str() const {
  return conn_.peer_str_;
}
template <class Stream>
std::string_view h2_stream<Stream>::client_cert() const {
  return conn_.client_cert_;
}
template <class Stream>
std::chrono::milliseconds h2_stream<Stream>::idle_timeout() const {
  return stream_idle_.count() ? stream_idle_ : ex_.rt().cfg->http.idle_timeout;
}

template <class Stream>
bool h2_stream<Stream>::header(std::string_view name, std::string_view value) {
  const auto max = conn_.ctx_.rt->cfg->http.max_header_bytes;
  head_bytes_ += name.size() + value.size() + 32;
  // Past the bound, nothing more is kept (the head is answered 431); far past it, the
  // decoding is not worth going on with (an HPACK bomb): the stream is reset.
  if (head_bytes_ > 4 * max) return false;
  if (head_bytes_ > max || trailers_) return true;
  // (Beast holds no field over 64 KiB: such a head is answered 431, as on HTTP/1.1)
  if (name.size() + value.size() > beast_field_max || (name == "cookie" && cookie_.size() + value.size() > beast_field_max)) {
    head_bytes_ = max + 1;
    return true;
  }
  if (name.starts_with(':')) {
    if (name == ":method") req_.method_string(value), has_method_ = true;
    else if (name == ":path") req_.target(value), has_path_ = true;
    else if (name == ":authority") authority_.assign(value);
    return true;  // (:scheme: the listener's scheme is what X-Forwarded-Proto says)
  }
  if (name == "cookie") join_cookie(cookie_, value);
  else if (name == "host") has_host_ = true, req_.insert(bhttp::field::host, value);
  else req_.insert(name, value);
  return true;
}

// The head is whole: what HTTP/1.1 says in its framing, said for the exchange.
template <class Stream>
void h2_stream<Stream>::head_done(bool end_stream) {
  trailers_ = true;  // (a later HEADERS block is trailers: dropped)
  in_end_ = body_done_ = end_stream;
  if (!cookie_.empty()) req_.insert(bhttp::field::cookie, cookie_);
  // :authority is the request's Host (RFC 9113 §8.3.1).
  if (!authority_.empty()) req_.set(bhttp::field::host, authority_);
  // A body without a length goes upstream chunked.
  if (!end_stream && req_.find(bhttp::field::content_length) == req_.end())
    req_.set(bhttp::field::transfer_encoding, "chunked");
  watch_->arm(idle_timeout());
}

template <class Stream>
void h2_stream<Stream>::data(const std::uint8_t* p, std::size_t n) {
  if (in_off_ == in_.size()) in_.clear(), in_off_ = 0;
  in_.append(reinterpret_cast<const char*>(p), n);
  wake();
}

template <class Stream>
void h2_stream<Stream>::gone() {
  reset_ = true;
  watch_->expire_now();  // (its waits, and its upstream connection's)
  wake();
}

template <class Stream>
asio::awaitable<void> h2_stream<Stream>::sleep() {
  // (set only when a wait_turn changed it: setting it cancels every wait of the timer,
  // and a stream streaming both ways has two, its body's and its answer's)
  if (wake_.expiry() != clock::time_point::max()) wake_.expires_at(clock::time_point::max());
  co_await wake_.async_wait(util::use_tuple);
}

template <class Stream>
asio::awaitable<bool> h2_stream<Stream>::send_continue() {
  if (reset_) co_return false;
  static constexpr char status[] = ":status", code[] = "100";
  const nghttp2_nv nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(status)),
                      reinterpret_cast<std::uint8_t*>(const_cast<char*>(code)), 7, 3, NGHTTP2_NV_FLAG_NONE};
  nghttp2_submit_headers(conn_.session_, NGHTTP2_FLAG_NONE, id_, nullptr, &nv, 1, nullptr);
  conn_.flush();
  co_return true;
}

template <class Stream>
asio::awaitable<error_code> h2_stream<Stream>::read_body(char* data, std::size_t size, std::size_t& produced) {
  produced = 0;
  watch_->arm(idle_timeout());
  for (;;) {
    if (reset_) co_return asio::error::connection_reset;
    if (in_off_ < in_.size()) {
      produced = std::min(size, in_.size() - in_off_);
      std::memcpy(data, in_.data() + in_off_, produced);
      in_off_ += produced;
      if (in_off_ == in_.size()) in_.clear(), in_off_ = 0, body_done_ = in_end_;
      // (the window opens again as the exchange reads: the client sends what it can take)
      nghttp2_session_consume(conn_.session_, id_, produced);
      conn_.flush();
      co_return error_code{};
    }
    if (in_end_) {
      body_done_ = true;
      co_return error_code{};
    }
    if (watch_->expired()) co_return error_code(beast::error::timeout);
    co_await sleep();
  }
}

template <class Stream>
ssize_t h2_stream<Stream>::read_out(nghttp2_session*, std::int32_t, std::uint8_t* buf, std::size_t length,
                                    std::uint32_t* flags, nghttp2_data_source* source, void*) {
  auto& s = *static_cast<h2_stream*>(source->ptr);
  const auto n = std::min(length, s.out_left_);
  if (n) std::memcpy(buf, s.out_, n);
  s.out_ += n;
  s.out_left_ -= n;
  if (n) s.watch_->arm(s.idle_timeout());  // (the client reads: the wait goes on)
  if (s.out_left_ == 0) {
    s.wake();
    if (s.out_last_) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      // (the trailers end the stream instead: a HEADERS frame after the last DATA)
      if (!s.out_trailers_.fields.empty() &&
          nghttp2_submit_trailer(s.conn_.session_, s.id_, s.out_trailers_.fields.data(), s.out_trailers_.fields.size()) == 0)
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    } else if (n == 0) {
      return NGHTTP2_ERR_DEFERRED;
    }
  }
  return static_cast<ssize_t>(n);
}

template <class Stream>
bool h2_stream<Stream>::submit_head(bool body) {
  responded_ = true;
  nghttp2_data_provider provider{};
  provider.source.ptr = this;
  provider.read_callback = &h2_stream::read_out;
  const auto rv = nghttp2_submit_response(conn_.session_, id_, head_.fields.data(), head_.fields.size(),
                                          body ? &provider : nullptr);
  conn_.flush();
  return rv == 0;
}

template <class Stream>
asio::awaitable<error_code> h2_stream<Stream>::sent_out() {
  watch_->arm(idle_timeout());
  for (;;) {
    if (reset_) co_return asio::error::connection_reset;
    // (the last piece: until its END_STREAM is sent, so that nothing after it, a reset
    // among them, can take the answer's place in nghttp2's queue)
    if (out_left_ == 0 && (!out_last_ || ended_out_)) co_return error_code{};
    if (watch_->expired()) co_return error_code(beast::error::timeout);
    co_await sleep();
  }
}

template <class Stream>
asio::awaitable<outcome> h2_stream<Stream>::send_local(unsigned status, bool, std::string_view body,
                                                       std::string_view extra, std::string_view content_type) {
  if (reset_ || responded_) co_return outcome::closed;
  local_response r;
  r.status = status;
  r.body = body;
  r.keep_alive = true;
  r.request_id = ex_.request_id();
  r.head = has_method_ && req_.method() == bhttp::verb::head;
  r.extra = extra;
  if (!content_type.empty()) r.content_type = content_type;
  local_ = render(r);
  const auto end = local_.find("\r\n\r\n");
  if (end == std::string::npos || !h2_head_of(std::string_view(local_).substr(0, end + 2), head_)) co_return outcome::closed;
  out_ = local_.data() + end + 4;
  out_left_ = local_.size() - end - 4;
  out_last_ = true;
  if (!submit_head(out_left_ > 0)) co_return outcome::closed;
  auto ec = co_await sent_out();
  co_return ec ? outcome::closed : outcome::keep_going;
}

template <class Stream>
bool h2_stream<Stream>::begin_response(response_parser& rp, std::string_view extra, bool, response_start& out) {
  auto plan = plan_response(req_, true, rp, false);
  out.body_expected = plan.body_expected;
  out.up_close_delimited = plan.up_close_delimited;
  out.keep_alive = true;
  body_expected_ = plan.body_expected;
  plan.rc.keep_alive = true;
  plan.rc.client_version = 11;
  plan.rc.extra = extra;
  head_text_.clear();
  const bool framed = build_downstream_response(rp.get(), plan.rc, head_text_);
  return h2_head_of(head_text_, head_) && framed;
}

template <class Stream>
std::span<const asio::const_buffer> h2_stream<Stream>::response_piece(bool head_too, const char* data, std::size_t n,
                                                                      bool last) {
  piece_head_ = head_too;
  out_ = data;
  out_left_ = n;
  out_last_ = last;
  piece_[0] = asio::const_buffer(data, n);
  return piece_;
}

template <class Stream>
asio::awaitable<std::tuple<error_code, std::size_t>> h2_stream<Stream>::write(std::span<const asio::const_buffer>) {
  const auto n = out_left_;
  if (reset_) co_return std::tuple{error_code(asio::error::connection_reset), std::size_t{0}};
  if (piece_head_) {
    // (a response with no body, or an empty one and no trailers, ends with its head)
    if (!submit_head(body_expected_ && !(out_last_ && out_left_ == 0 && out_trailers_.fields.empty())))
      co_return std::tuple{error_code(asio::error::connection_reset), std::size_t{0}};
  } else {
    nghttp2_session_resume_data(conn_.session_, id_);
    conn_.flush();
  }
  auto ec = co_await sent_out();
  co_return std::tuple{ec, ec ? std::size_t{0} : n};
}

template <class Stream>
void h2_stream<Stream>::set_trailers(std::span<const std::pair<std::string, std::string>> fields) {
  auto& t = out_trailers_;
  t.storage.clear();
  t.fields.clear();
  std::size_t size = 0;
  for (const auto& [n, v] : fields) size += n.size() + v.size();
  t.storage.reserve(size);  // (whole first: the fields point into it)
  for (const auto& [n, v] : fields) {
    if (n.empty() || n.front() == ':' || connection_specific(n)) continue;
    const auto at = t.storage.size();
    t.storage.append(n).append(v);
    t.fields.push_back({reinterpret_cast<std::uint8_t*>(t.storage.data() + at),
                        reinterpret_cast<std::uint8_t*>(t.storage.data() + at + n.size()), n.size(), v.size(),
                        NGHTTP2_NV_FLAG_NONE});
  }
}

template <class Stream>
asio::awaitable<bool> h2_stream<Stream>::wait_turn(std::chrono::milliseconds wait) {
  const auto until = clock::now() + wait;
  watch_->arm(wait + std::chrono::seconds(1));
  // (body bytes arriving meanwhile wake it too: it sleeps on)
  while (!reset_ && !watch_->expired() && clock::now() < until) {
    wake_.expires_at(until);
    co_await wake_.async_wait(util::use_tuple);
  }
  co_return reset_ || watch_->expired();
}

}  // namespace fg::http::detail
