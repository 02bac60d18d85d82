#pragma once
// The HTTP/2 connection (members of h2_connection<Stream>, h2_connection.hpp): nghttp2's
// session over the stream, one coroutine reading frames into it and one writing what it
// has to send, a coroutine per stream running its exchange, and the bounds a hostile
// client meets beyond nghttp2's own.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "http/exchange_limits.ipp"
#include "http/exchange_upstream.ipp"
#include "http/h2.hpp"
#include "http/h2_connection.hpp"
#include "http/h2_stream.ipp"
#include "obs/access_log.hpp"
#include "obs/metrics.hpp"

namespace fg::http::detail {

template <class Stream>
h2_connection<Stream>::h2_connection(worker_context& ctx, Stream stream, connection_slot slot, const net::address& peer,
                                     std::string_view preread)
    : ctx_(ctx), conn_(ctx, std::move(stream), std::move(slot)), peer_(peer), peer_str_(peer.to_string()),
      write_wanted_(conn_.stream().get_executor()), streams_done_(conn_.stream().get_executor()) {
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, &on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, &on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, &on_stream_close);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, &on_frame_send);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1);
  // (nghttp2's own bounds, stated: CVE-2023-44487's rapid reset, CVE-2024-28182's
  // CONTINUATION flood, SETTINGS entries, acknowledgements queued for a client that reads nothing)
  nghttp2_option_set_stream_reset_rate_limit(opt, 1000, 33);
  nghttp2_option_set_max_continuations(opt, 8);
  nghttp2_option_set_max_settings(opt, 32);
  nghttp2_option_set_max_outbound_ack(opt, 1000);
  nghttp2_session_server_new2(&session_, cb, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
  head_deadline_ = deadline::after(ctx.rt->cfg->http.header_timeout);
  announce_settings();
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, h2_limits::connection_window);
  if (!preread.empty()) {
    auto& b = conn_.buffer();
    auto room = b.prepare(preread.size());
    std::memcpy(room.data(), preread.data(), preread.size());
    b.commit(preread.size());
  }
}

template <class Stream>
h2_connection<Stream>::~h2_connection() {
  streams_.clear();  // (before the session: a stream's exchange may still name it)
  nghttp2_session_del(session_);
}

template <class Stream>
asio::awaitable<void> h2_connection<Stream>::run() {
  using namespace asio::experimental::awaitable_operators;
  if (ctx_.metrics) ctx_.metrics->h2_connection(+1);
  try {
    co_await (reader() && writer());
  } catch (const std::exception& e) {
    spdlog::error("{}: HTTP/2 connection ended by exception: {}", peer_str_, e.what());
  }
  dead_ = true;
  // Every stream's waits end; the connection goes once their exchanges have.
  for (auto it = streams_.begin(); it != streams_.end();) {
    auto& s = *it++;
    if (s.served_ || !s.started_) streams_.erase(s.self_);
    else s.gone();
  }
  while (!streams_.empty()) {
    streams_done_.expires_at(clock::time_point::max());
    co_await streams_done_.async_wait(util::use_tuple);
  }
  if (ctx_.metrics) ctx_.metrics->h2_connection(-1);
  close_stream(conn_.stream());
}

// The settings a configuration gives, when they are not those announced last (at the
// start, and after a reload that changed them: a reload keeps connections).
template <class Stream>
void h2_connection<Stream>::announce_settings() {
  const auto& cfg = *ctx_.rt->cfg;
  const auto streams = cfg.http2.max_concurrent_streams;
  const auto head = static_cast<std::uint32_t>(cfg.http.max_header_bytes);
  if (streams == announced_streams_ && head == announced_head_) return;
  const bool first = announced_streams_ == 0;
  announced_streams_ = streams;
  announced_head_ = head;
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, streams},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, head},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<std::uint32_t>(h2_limits::stream_window)},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, first ? std::size(settings) : 2);
  flush();
}

template <class Stream>
void h2_connection<Stream>::rearm() {
  auto& w = conn_.watch();
  const bool open = !streams_.empty();
  if (open || writing_) w.set_busy();
  else w.set_idle();
  // Each deadline is fixed when its wait begins, never moved by frames that come
  // meanwhile: a write that makes no progress (the writer arms it), a connection's first
  // head or a head block left half-sent, a connection idle since its last stream. While
  // streams are open, each stream's own deadline bounds its waits.
  if (writing_) return;
  if (in_header_block_) w.arm_at(block_deadline_);
  else if (streams_seen_ == 0) w.arm_at(head_deadline_);
  else if (!open) w.arm_at(idle_deadline_);
  else w.arm_at(clock::time_point::max());
}

template <class Stream>
void h2_connection<Stream>::terminate(std::uint32_t code, const char* why) {
  if (!goaway_ && why) spdlog::debug("{}: HTTP/2 connection ended: {}", peer_str_, why);
  goaway_ = true;
  nghttp2_session_terminate_session(session_, code);
  flush();
}

template <class Stream>
asio::awaitable<void> h2_connection<Stream>::reader() {
  auto& b = conn_.buffer();
  auto& w = conn_.watch();
  for (;;) {
    if (b.size()) {
      const auto rv = nghttp2_session_mem_recv(session_, static_cast<const std::uint8_t*>(b.data().data()), b.size());
      if (rv < 0) {
        spdlog::debug("{}: HTTP/2: {}", peer_str_, nghttp2_strerror(static_cast<int>(rv)));
        // A connection error (a flood nghttp2 bounds among them): its GOAWAY goes, unless
        // nghttp2 queued one already (then this one is refused); a bad preface gets none.
        if (rv != NGHTTP2_ERR_BAD_CLIENT_MAGIC)
          nghttp2_session_terminate_session(
              session_, rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS ? NGHTTP2_ENHANCE_YOUR_CALM
                                                                                           : NGHTTP2_PROTOCOL_ERROR);
        goaway_ = true;
        flush();
        break;
      }
      b.consume(b.size());
      flush();
    }
    if (dead_ || !nghttp2_session_want_read(session_)) break;
    announce_settings();
    if (ctx_.draining && !goaway_) {
      // Drain: the streams in flight finish, no new one starts.
      goaway_ = true;
      nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session_),
                            NGHTTP2_NO_ERROR, nullptr, 0);
      flush();
    }
    rearm();
    error_code ec;
    std::size_t n = 0;
    if constexpr (is_socket<Stream> || is_tls<Stream>) {
      // Idle (no stream, nothing to send): the wait for its next bytes holds no buffer.
      if (streams_.empty() && !writing_ && b.size() == 0 && !holds_input(conn_.stream())) {
        b.shrink_to_fit();
        std::string().swap(out_);
        if constexpr (is_tls<Stream>) conn_.stream().release_buffers();
        auto [wec] = co_await socket_of(conn_.stream())->async_wait(tcp::socket::wait_read, deferred_tuple);
        ec = wec;
      }
    }
    if (!ec) {
      auto [rec, rn] = co_await conn_.stream().async_read_some(b.prepare(16384), read_token<Stream>());
      ec = rec;
      n = rn;
    }
    if (ec) {
      if (w.expired() || (ctx_.draining && ec == asio::error::operation_aborted)) {
        // Idle past its time, or drained: told so (the writer's last words), then closed.
        terminate(NGHTTP2_NO_ERROR, w.expired() ? "timed out" : nullptr);
      }
      break;
    }
    b.commit(n);
  }
  // The client's end (or its error): nothing it asked for can reach it any more.
  // Else (a GOAWAY queued) the writer sends what is left, then ends.
  reader_done_ = true;
  if (!goaway_) dead_ = true;
  dead_ = dead_ || !nghttp2_session_want_write(session_);
  if (dead_)
    for (auto& s : streams_) s.gone();
  flush();
}

template <class Stream>
asio::awaitable<void> h2_connection<Stream>::writer() {
  auto& w = conn_.watch();
  while (!dead_) {
    out_.clear();
    while (out_.size() < 65536) {
      const std::uint8_t* p = nullptr;
      const auto n = nghttp2_session_mem_send(session_, &p);
      if (n < 0) {
        spdlog::debug("{}: HTTP/2: {}", peer_str_, nghttp2_strerror(static_cast<int>(n)));
        dead_ = true;
        break;
      }
      if (n == 0) break;
      out_.append(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
    }
    if (!out_.empty() && !dead_) {
      // (the client must take some of it within http.idle_timeout)
      writing_ = true;
      w.set_busy();
      w.arm(ctx_.rt->cfg->http.idle_timeout);
      auto [ec, n] = co_await asio::async_write(conn_.stream(), asio::buffer(out_), deferred_tuple);
      writing_ = false;
      if (ec) dead_ = true;
      else rearm();
      continue;
    }
    if (dead_ || (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_)) ||
        (reader_done_ && !nghttp2_session_want_write(session_)))
      break;
    write_wanted_.expires_at(clock::time_point::max());
    co_await write_wanted_.async_wait(util::use_tuple);
  }
  dead_ = true;
  for (auto& s : streams_) s.gone();
  // (the reader's wait ends with the socket's)
  error_code ec;
  if (auto* s = socket_of(conn_.stream())) s->cancel(ec);
  if constexpr (!is_socket<Stream> && !is_tls<Stream>) conn_.stream().close();
}

template <class Stream>
asio::awaitable<void> h2_connection<Stream>::serve(h2_stream<Stream>& s) {
  try {
    s.ex_.use_current();
    if (ctx_.draining && !goaway_) {
      // Drain: the streams begun are served, no later one is.
      goaway_ = true;
      nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session_),
                            NGHTTP2_NO_ERROR, nullptr, 0);
      flush();
    }
    if (!s.has_method_ || !s.has_path_ || s.req_.target().empty()) co_await reject(s, 400);  // (CONNECT)
    else if (s.head_bytes_ > s.ex_.rt().cfg->http.max_header_bytes) co_await reject(s, 431);
    else {
      auto request = s.ex_.begin();
      auto st = s.ex_.decide(request.source());
      if (st == limit::status::pending) {
        auto [ec] = co_await s.ex_.wait(request.source());
        st = s.ex_.decided(request.source(), ec);
      }
      // A stream reset before its turn came is charged all the same (a rapid reset costs
      // its client what the requests would have), and goes no further.
      if (s.reset_) s.ex_.log_request(499);
      else co_await s.ex_.respond(st);
    }
  } catch (const std::exception& e) {
    spdlog::error("{}: HTTP/2 stream ended by exception: {}", peer_str_, e.what());
  }
  s.served_ = true;
  if (!s.closed_ && !dead_) {
    // Answered whole before the client's body was all sent: it may stop (RFC 9113 §8.1);
    // or the answer was cut short: the client must not take it for a whole one.
    if (!s.ended_out_) nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s.id_, NGHTTP2_INTERNAL_ERROR);
    else if (!s.in_end_) nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s.id_, NGHTTP2_NO_ERROR);
    flush();
  }
  if (s.closed_ || dead_) drop(s);
}

template <class Stream>
asio::awaitable<void> h2_connection<Stream>::reject(h2_stream<Stream>& s, unsigned status) {
  if (ctx_.metrics) ctx_.metrics->request(obs::metrics_layout::none, status);
  auto* log = ctx_.access.get();
  if (log && log->enabled()) log->write({peer_str_, "-", "-", status, 0, 0, -1, 0, "", "", "", 0, "HTTP/2", "", -1});
  co_await s.send_local(status, false);
}

template <class Stream>
void h2_connection<Stream>::drop(h2_stream<Stream>& s) {
  // Body bytes received and never read: the connection's window opens for them.
  if (s.in_off_ < s.in_.size()) nghttp2_session_consume_connection(session_, s.in_.size() - s.in_off_);
  if (!s.closed_) nghttp2_session_set_stream_user_data(session_, s.id_, nullptr);
  streams_.erase(s.self_);
  if (streams_.empty()) streams_done_.cancel();
  if (dead_) return;
  if (streams_.empty()) idle_deadline_ = deadline::after(ctx_.rt->cfg->http.idle_timeout);
  // Drained, or told GOAWAY: the last stream done ends the connection.
  if ((ctx_.draining || goaway_) && streams_.empty()) terminate(NGHTTP2_NO_ERROR, nullptr);
  rearm();
  flush();
}

template <class Stream>
void h2_connection<Stream>::reset_sent() {
  if (!resets_.take(h2_limits::reset_burst, h2_limits::reset_rate))
    terminate(NGHTTP2_ENHANCE_YOUR_CALM, "too many streams reset by the gateway");
}

// False: the connection is ended (a flood of frames that serve no request).
template <class Stream>
bool h2_connection<Stream>::frame(const nghttp2_frame& f) {
  bool idle = false;
  switch (f.hd.type) {
    case NGHTTP2_DATA: idle = f.hd.length == 0 && !(f.hd.flags & NGHTTP2_FLAG_END_STREAM); break;
    case NGHTTP2_PING:
    case NGHTTP2_SETTINGS: idle = !(f.hd.flags & NGHTTP2_FLAG_ACK); break;
    case NGHTTP2_PRIORITY:
    case NGHTTP2_RST_STREAM: idle = true; break;
    case NGHTTP2_WINDOW_UPDATE:
      idle = ++window_updates_ > h2_limits::window_updates_free + 4 * data_frames_sent_;
      break;
    default: break;
  }
  if (!idle || idle_frames_.take(h2_limits::idle_frames_burst, h2_limits::idle_frames_rate)) return true;
  terminate(NGHTTP2_ENHANCE_YOUR_CALM, "a flood of frames that serve no request");
  return false;
}

template <class Stream>
int h2_connection<Stream>::on_begin_headers(nghttp2_session* session, const nghttp2_frame* f, void* self) {
  auto& c = *static_cast<h2_connection*>(self);
  c.block_deadline_ = deadline::after(c.ctx_.rt->cfg->http.header_timeout);
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) {
    c.in_header_block_ = true;
    return 0;
  }
  // Streams reset by the client whose exchanges have not ended yet count too.
  if (c.goaway_ || c.streams_.size() >= 2 * std::size_t{c.ctx_.rt->cfg->http2.max_concurrent_streams}) {
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_REFUSED_STREAM);
    return 0;
  }
  c.in_header_block_ = true;
  ++c.streams_seen_;
  auto& s = c.streams_.emplace_back(c, f->hd.stream_id);
  s.self_ = std::prev(c.streams_.end());
  nghttp2_session_set_stream_user_data(session, f->hd.stream_id, &s);
  if (c.ctx_.metrics) c.ctx_.metrics->h2_stream();
  return 0;
}

template <class Stream>
int h2_connection<Stream>::on_header(nghttp2_session* session, const nghttp2_frame* f, const std::uint8_t* name,
                                     std::size_t namelen, const std::uint8_t* value, std::size_t valuelen, std::uint8_t,
                                     void*) {
  auto* s = static_cast<h2_stream<Stream>*>(nghttp2_session_get_stream_user_data(session, f->hd.stream_id));
  if (!s) return 0;
  try {
    if (!s->header({reinterpret_cast<const char*>(name), namelen}, {reinterpret_cast<const char*>(value), valuelen}))
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // (RST_STREAM: the rest of the block is not kept)
  } catch (const std::exception&) {
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  return 0;
}

template <class Stream>
int h2_connection<Stream>::on_frame_recv(nghttp2_session* session, const nghttp2_frame* f, void* self) {
  auto& c = *static_cast<h2_connection*>(self);
  if (!c.frame(*f)) return 0;
  auto* s = static_cast<h2_stream<Stream>*>(nghttp2_session_get_stream_user_data(session, f->hd.stream_id));
  const bool end = f->hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (f->hd.type == NGHTTP2_HEADERS) {
    c.in_header_block_ = false;
    if (!s) return 0;
    if (f->headers.cat == NGHTTP2_HCAT_REQUEST) {
      try {
        s->head_done(end);
      } catch (const std::exception&) {
        s->head_bytes_ = c.ctx_.rt->cfg->http.max_header_bytes + 1;  // (answered 431)
      }
      s->started_ = true;
      auto executor = c.conn_.stream().get_executor();
      asio::co_spawn(executor, c.serve(*s), obs::logged_end{"HTTP/2 stream ended by exception"});
    } else if (end) {
      s->body_end();
    }
  } else if (f->hd.type == NGHTTP2_DATA && s && end) {
    s->body_end();
  }
  return 0;
}

template <class Stream>
int h2_connection<Stream>::on_data(nghttp2_session* session, std::uint8_t, std::int32_t id, const std::uint8_t* p,
                                   std::size_t n, void*) {
  auto* s = static_cast<h2_stream<Stream>*>(nghttp2_session_get_stream_user_data(session, id));
  if (s && !s->served_) s->data(p, n);
  else nghttp2_session_consume(session, id, n);  // (no one reads it)
  return 0;
}

template <class Stream>
int h2_connection<Stream>::on_stream_close(nghttp2_session* session, std::int32_t id, std::uint32_t code, void* self) {
  auto& c = *static_cast<h2_connection*>(self);
  auto* s = static_cast<h2_stream<Stream>*>(nghttp2_session_get_stream_user_data(session, id));
  if (!s) return 0;
  s->closed_ = true;
  nghttp2_session_set_stream_user_data(session, id, nullptr);
  // (one whose head never came whole has no exchange to wait for)
  if (!s->started_) c.in_header_block_ = false;
  if (s->served_ || !s->started_) {
    c.drop(*s);
    return 0;
  }
  // Reset by the client (or closed by an error) before its exchange ended: what the
  // stream took stays charged; its waits end, and with them what it holds.
  if (code != NGHTTP2_NO_ERROR || !s->ended_out_) s->gone();
  return 0;
}

template <class Stream>
int h2_connection<Stream>::on_frame_send(nghttp2_session* session, const nghttp2_frame* f, void* self) {
  auto& c = *static_cast<h2_connection*>(self);
  if ((f->hd.type == NGHTTP2_DATA || f->hd.type == NGHTTP2_HEADERS) && (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
    if (auto* s = static_cast<h2_stream<Stream>*>(nghttp2_session_get_stream_user_data(session, f->hd.stream_id))) {
      s->ended_out_ = true;
      s->wake();
    }
  }
  if (f->hd.type == NGHTTP2_DATA) ++c.data_frames_sent_;
  else if (f->hd.type == NGHTTP2_RST_STREAM && f->rst_stream.error_code != NGHTTP2_NO_ERROR) c.reset_sent();
  else if (f->hd.type == NGHTTP2_GOAWAY) c.goaway_ = true;
  return 0;
}

template <class Stream>
asio::awaitable<void> serve_h2(worker_context& ctx, Stream stream, connection_slot slot, net::address peer,
                               std::string preread, std::string client_cert) {
  h2_connection<Stream> c(ctx, std::move(stream), std::move(slot), peer, preread);
  c.set_client_cert(std::move(client_cert));
  co_await c.run();
}

}  // namespace fg::http::detail
