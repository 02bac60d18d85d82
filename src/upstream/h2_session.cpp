#include "upstream/h2_session.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include <cstring>

#include "util/asio.hpp"

namespace fg::upstream {

namespace asio = boost::asio;
using error_code = boost::system::error_code;

namespace {
error_code& ignored_ec() {
  static thread_local error_code ec;
  return ec;
}
}  // namespace

h2_session::h2_session(connection_ptr c) : conn_(std::move(c)), write_wanted_(conn_->get_executor()) {
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, &on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, &on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, &on_stream_close);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, &on_frame_send);
  nghttp2_session_callbacks_set_on_frame_not_send_callback(cb, &on_frame_not_send);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1);
  // (a server is a peer too: its SETTINGS entries, CONTINUATION frames and the
  // acknowledgements it would have queued are bounded as a client's are)
  nghttp2_option_set_max_continuations(opt, 8);
  nghttp2_option_set_max_settings(opt, 32);
  nghttp2_option_set_max_outbound_ack(opt, 1000);
  nghttp2_session_client_new2(&session_, cb, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<std::uint32_t>(h2_limits_up::stream_window)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<std::uint32_t>(h2_limits_up::max_head_bytes)},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, h2_limits_up::connection_window);
}

h2_session::~h2_session() {
  for (auto* c : calls_) c->detach(true);
  nghttp2_session_del(session_);
}

void h2_session::start() {
  asio::co_spawn(conn_->get_executor(), reader(shared_from_this()), asio::detached);
  asio::co_spawn(conn_->get_executor(), writer(shared_from_this()), asio::detached);
}

bool h2_session::open_for_more() const {
  if (leaving() || !nghttp2_session_want_read(session_)) return false;
  // (a stream id past 2^31 - 1 cannot be had: the session is then done)
  if (nghttp2_session_get_next_stream_id(session_) > (1u << 31) - 2) return false;
  const auto max = nghttp2_session_get_remote_settings(session_, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
  return calls_.size() < max;
}

void h2_session::close() {
  if (dead_) return;
  die();
}

void h2_session::die() {
  dead_ = true;
  error_code ignored;
  conn_->socket.cancel(ignored);
  conn_->socket.close(ignored);
  // Every call's waits end: what was never sent may go again.
  for (auto* c : std::exchange(calls_, {})) c->detach(c->head_sent_);
  flush();
}

asio::awaitable<void> h2_session::reader(std::shared_ptr<h2_session> self) {
  auto& b = conn_->buffer;
  while (!dead_) {
    auto [ec, n] = co_await conn_->async_read_some(b.prepare(16384), util::use_tuple);
    if (ec || dead_) break;
    b.commit(n);
    ++reads_;
    const auto rv = nghttp2_session_mem_recv(session_, static_cast<const std::uint8_t*>(b.data().data()), b.size());
    b.consume(b.size());
    if (rv < 0) {
      spdlog::warn("upstream {}: HTTP/2: {}", conn_->socket.remote_endpoint(ec).address().to_string(),
                   nghttp2_strerror(static_cast<int>(rv)));
      nghttp2_session_terminate_session(session_, NGHTTP2_PROTOCOL_ERROR);
      flush();
      break;
    }
    flush();
    if (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_)) break;
  }
  if (!dead_) die();
}

asio::awaitable<void> h2_session::writer(std::shared_ptr<h2_session> self) {
  while (!dead_) {
    out_.clear();
    // (what nghttp2 has to send, up to a write's worth)
    while (out_.size() < 64 * 1024) {
      const std::uint8_t* data = nullptr;
      const auto n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) {
        die();
        co_return;
      }
      if (n == 0) break;
      out_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
    }
    if (out_.empty()) {
      if (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_)) break;
      write_wanted_.expires_at(std::chrono::steady_clock::time_point::max());
      co_await write_wanted_.async_wait(util::use_tuple);
      continue;
    }
    auto [ec, n] = co_await asio::async_write(*conn_, asio::buffer(out_), util::use_tuple);
    if (ec) break;
  }
  if (!dead_) die();
}

h2_call* h2_session::call_of(nghttp2_session* s, std::int32_t id) {
  return static_cast<h2_call*>(nghttp2_session_get_stream_user_data(s, id));
}

int h2_session::on_begin_headers(nghttp2_session*, const nghttp2_frame*, void*) { return 0; }

int h2_session::on_header(nghttp2_session* s, const nghttp2_frame* f, const std::uint8_t* name, std::size_t namelen,
                          const std::uint8_t* value, std::size_t valuelen, std::uint8_t, void*) {
  auto* c = call_of(s, f->hd.stream_id);
  if (!c || f->hd.type != NGHTTP2_HEADERS) return 0;
  c->head_bytes_ += namelen + valuelen + 32;
  // (a head or trailers past the bound: the stream is reset, the call fails)
  if (c->head_bytes_ > h2_limits_up::max_head_bytes) {
    c->too_large_ = true;
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  const std::string_view n(reinterpret_cast<const char*>(name), namelen), v(reinterpret_cast<const char*>(value), valuelen);
  if (c->head_done_) {
    if (!n.starts_with(':')) c->trailers_.emplace_back(n, v);
    return 0;
  }
  if (n == ":status") {
    unsigned code = 0;
    for (char ch : v) code = code * 10 + static_cast<unsigned>(ch - '0');  // (nghttp2 checked: 3 digits)
    c->status_ = code;
  } else if (!n.starts_with(':')) {
    c->fields_.emplace_back(n, v);
  }
  return 0;
}

int h2_session::on_frame_recv(nghttp2_session* s, const nghttp2_frame* f, void* user) {
  auto& self = *static_cast<h2_session*>(user);
  if (f->hd.type == NGHTTP2_GOAWAY) {
    self.goaway_ = true;  // (the streams above its last id are closed REFUSED_STREAM by nghttp2)
    return 0;
  }
  auto* c = f->hd.stream_id ? call_of(s, f->hd.stream_id) : nullptr;
  if (!c) return 0;
  const bool end = f->hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (f->hd.type == NGHTTP2_HEADERS && !c->head_done_) {
    if (c->status_ >= 200) {
      c->head_done_ = true;
      c->goaway_before_head_ = self.goaway_;
      c->end_with_head_ = end;
      c->head_bytes_ = 0;  // (the trailers have a bound of their own)
    } else {
      c->fields_.clear(), c->head_bytes_ = 0;  // an interim answer: read past
    }
  }
  if (end && c->head_done_) c->in_end_ = true;
  c->wake();
  return 0;
}

int h2_session::on_data(nghttp2_session* s, std::uint8_t, std::int32_t id, const std::uint8_t* data, std::size_t n,
                        void*) {
  // The connection's window back at once; the stream's as its exchange reads.
  nghttp2_session_consume_connection(s, n);
  auto* c = call_of(s, id);
  if (!c) return 0;
  if (c->in_off_ == c->in_.size()) c->in_.clear(), c->in_off_ = 0;
  c->in_.append(reinterpret_cast<const char*>(data), n);
  c->wake();
  return 0;
}

int h2_session::on_stream_close(nghttp2_session* s, std::int32_t id, std::uint32_t code, void* user) {
  auto* c = call_of(s, id);
  if (!c) return 0;
  static_cast<h2_session*>(user)->ended(c);
  if (code == NGHTTP2_REFUSED_STREAM) c->refused_ = true;
  else if (code != NGHTTP2_NO_ERROR || !c->in_end_) c->reset_code_ = code ? code : std::uint32_t{NGHTTP2_INTERNAL_ERROR};
  c->closed_ = true;
  c->wake();
  return 0;
}

int h2_session::on_frame_send(nghttp2_session* s, const nghttp2_frame* f, void*) {
  if (f->hd.type != NGHTTP2_HEADERS) return 0;
  if (auto* c = call_of(s, f->hd.stream_id)) c->head_sent_ = true;
  return 0;
}

int h2_session::on_frame_not_send(nghttp2_session* s, const nghttp2_frame* f, int, void* user) {
  if (f->hd.type != NGHTTP2_HEADERS) return 0;
  if (auto* c = call_of(s, f->hd.stream_id)) {
    c->detach(false);
    static_cast<h2_session*>(user)->ended(c);
  }
  return 0;
}

// --- h2_call ---

bool h2_call::start(std::shared_ptr<h2_session> s, std::span<const nghttp2_nv> fields, bool body,
                    deadline::entry& timeouts, deadline::entry& client) {
  if (!s->open_for_more()) return false;
  cancel();  // (a call that goes again starts afresh)
  out_ = nullptr, out_left_ = 0, out_last_ = false, head_sent_ = false;
  status_ = 0, head_done_ = end_with_head_ = false, head_bytes_ = 0;
  fields_.clear(), trailers_.clear(), in_.clear(), in_off_ = 0, in_end_ = false;
  closed_ = refused_ = too_large_ = abandoned_ = goaway_before_head_ = false, reset_code_ = 0;
  nghttp2_data_provider provider{};
  provider.source.ptr = this;
  provider.read_callback = &h2_call::read_out;
  const auto id = nghttp2_submit_request(s->session_, nullptr, fields.data(), fields.size(), body ? &provider : nullptr, this);
  if (id < 0) return false;
  s_ = std::move(s);
  id_ = id;
  reads_at_start_ = s_->reads_;
  watch_ = &timeouts;
  timeouts.watch_upstream(&h2_call::expire, this);
  client_ = &client;
  if (&client != &timeouts) client.watch_upstream(&h2_call::abandon, this);
  // (its expiry never changes: its waits, the body's and the response's at once in a
  // bidirectional call, end only by cancel(), and none cancels the other's)
  if (!wake_) wake_ = std::make_unique<asio::steady_timer>(s_->conn_->get_executor(), std::chrono::steady_clock::time_point::max());
  s_->calls_.insert(this);
  s_->flush();
  return true;
}

void h2_call::detach(bool sent) {
  if (!closed_ && !sent) refused_ = true;
  else if (!closed_ && !in_end_) reset_code_ = NGHTTP2_INTERNAL_ERROR;
  closed_ = true;
  if (s_ && !s_->dead_ && id_) nghttp2_session_set_stream_user_data(s_->session_, id_, nullptr);
  wake();
}

void h2_call::cancel() {
  if (!s_) return;
  if (watch_) watch_->forget_upstream(), watch_ = nullptr;
  if (client_) client_->forget_upstream(), client_ = nullptr;
  if (!closed_) {
    closed_ = true;
    if (!in_end_) reset_code_ = NGHTTP2_CANCEL;
    if (!s_->dead_) {
      nghttp2_session_set_stream_user_data(s_->session_, id_, nullptr);
      nghttp2_submit_rst_stream(s_->session_, NGHTTP2_FLAG_NONE, id_, NGHTTP2_CANCEL);
      s_->flush();
    }
    s_->ended(this);
  }
  s_.reset();
  wake();
}

asio::awaitable<void> h2_call::sleep() {
  co_await wake_->async_wait(util::use_tuple);
}

bool h2_call::turned_away() const {
  if (!goaway_before_head_ || !end_with_head_ || status_ != 200) return false;
  for (const auto& [n, v] : fields_)
    if (n == "grpc-status") return v == "1";
  return false;
}

h2_call::error_code h2_call::cut_short() {
  if (abandoned_) return asio::error::operation_aborted;
  if (!watch_ || !watch_->expired()) return {};
  if (s_ && s_->reads_ == reads_at_start_ && !s_->retired_) {
    s_->retired_ = true;  // (its calls finish; the pool offers it no more)
    spdlog::warn("upstream {}: an HTTP/2 connection silent for a whole call's timeout: no longer used",
                 s_->conn_->socket.remote_endpoint(ignored_ec()).address().to_string());
  }
  return asio::error::timed_out;
}

// What a call that can go no further comes to.
h2_call::error_code h2_call::failed() const {
  if (refused_) return asio::error::connection_refused;
  if (too_large_) return asio::error::message_size;
  return asio::error::connection_reset;
}

ssize_t h2_call::read_out(nghttp2_session* s, std::int32_t id, std::uint8_t* buf, std::size_t length,
                          std::uint32_t* flags, nghttp2_data_source*, void*) {
  // (by the stream's user data, never the provider's pointer: a cancelled call is gone)
  auto* c = h2_session::call_of(s, id);
  if (!c) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  const auto n = std::min(length, c->out_left_);
  if (n) std::memcpy(buf, c->out_, n);
  c->out_ += n;
  c->out_left_ -= n;
  if (c->out_left_ == 0) {
    c->wake();
    if (c->out_last_) *flags |= NGHTTP2_DATA_FLAG_EOF;
    else if (n == 0) return NGHTTP2_ERR_DEFERRED;
  }
  return static_cast<ssize_t>(n);
}

asio::awaitable<error_code> h2_call::send(const char* data, std::size_t n, bool last) {
  if (!s_ || closed_) co_return failed();
  out_ = data;
  out_left_ = n;
  out_last_ = last;
  nghttp2_session_resume_data(s_->session_, id_);
  s_->flush();
  // (until nghttp2 took it all: the server's window permitting)
  while (out_left_ > 0) {
    if (closed_ || !s_) co_return in_end_ && !reset_code_ ? error_code{} : failed();
    if (auto why = cut_short()) co_return why;
    co_await sleep();
  }
  co_return error_code{};
}

asio::awaitable<error_code> h2_call::head() {
  for (;;) {
    if (head_done_) co_return error_code{};
    if (closed_ || !s_) co_return failed();
    if (auto why = cut_short()) co_return why;
    co_await sleep();
  }
}

asio::awaitable<error_code> h2_call::read(char* buf, std::size_t size, std::size_t& n) {
  n = 0;
  for (;;) {
    if (in_off_ < in_.size()) {
      n = std::min(size, in_.size() - in_off_);
      std::memcpy(buf, in_.data() + in_off_, n);
      in_off_ += n;
      if (in_off_ == in_.size()) in_.clear(), in_off_ = 0;
      if (s_ && !closed_) {
        nghttp2_session_consume_stream(s_->session_, id_, n);
        s_->flush();
      }
      co_return error_code{};
    }
    if (in_end_) co_return error_code{};
    if (closed_ || !s_) co_return failed();
    if (auto why = cut_short()) co_return why;
    co_await sleep();
  }
}

}  // namespace fg::upstream
