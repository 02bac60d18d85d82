#pragma once
// HTTP/2 on one downstream connection (RFC 9113), with nghttp2 as its codec: the
// connection reads frames into nghttp2 and writes what it has to send, and each stream
// is one request served by its own exchange (exchange.hpp), whose downstream it is
// (h2_stream). Flow control is the exchange's pace: a stream's window opens again only
// as its exchange reads the body (nghttp2's automatic WINDOW_UPDATE is off), and a
// response's DATA goes only as the client's window lets it, its exchange waiting
// meanwhile; so a stream whose client reads nothing stalls its own upstream only.
// Members are defined in h2_connection.ipp (the connection) and h2_stream.ipp (a
// stream); instantiated in h2.cpp (tcp::socket) and h2_tls.cpp (tls::stream).
// Beast-heavy: include only from those and their tests.
#include <nghttp2/nghttp2.h>

#include <boost/asio/steady_timer.hpp>

#include <array>
#include <list>
#include <string>

#include "http/connection.hpp"
#include "http/exchange.hpp"
#include "http/h2_fields.hpp"

namespace fg::http::detail {

template <class Stream>
class h2_connection;

// What a connection bounds beyond nghttp2's own limits (CONTINUATION frames, SETTINGS
// entries, queued acknowledgements, the rate of resets received).
struct h2_limits {
  static constexpr std::int32_t stream_window = 65535;         // each stream's receive window
  static constexpr std::int32_t connection_window = 1 << 20;  // the connection's: all bodies unread
  // Resets the gateway sends (protocol errors it finds, streams it refuses), a token
  // bucket: `reset_burst`, refilled `reset_rate` a second (CVE-2025-8671).
  static constexpr double reset_burst = 200, reset_rate = 20;
  // Frames that serve no request (PING, SETTINGS, PRIORITY, empty DATA, RST_STREAM, an
  // unneeded WINDOW_UPDATE): a token bucket, beyond which the connection is ended.
  static constexpr double idle_frames_burst = 1000, idle_frames_rate = 100;
  // WINDOW_UPDATE frames received: at most this many, plus 4 per DATA frame sent.
  static constexpr std::uint64_t window_updates_free = 1000;
};

// A token bucket on the worker's coarse clock.
struct h2_bucket {
  double tokens;
  clock::time_point at = deadline::coarse_now;
  // False once a cost finds it empty.
  bool take(double burst, double rate) {
    const auto now = deadline::coarse_now;
    tokens = std::min(burst, tokens + std::chrono::duration<double>(now - at).count() * rate);
    at = now;
    if (tokens < 1) return false;
    tokens -= 1;
    return true;
  }
};

// The longest field (name and value) Beast's fields hold.
inline constexpr std::size_t beast_field_max = 65000;

// One stream: its request head and body as they arrive, its answer as it goes; the
// exchange's downstream (the members exchange.hpp lists).
template <class Stream>
class h2_stream {
 public:
  using conn_type = h2_connection<Stream>;
  h2_stream(conn_type& conn, std::int32_t id);
  h2_stream(const h2_stream&) = delete;
  h2_stream& operator=(const h2_stream&) = delete;

  // The exchange's downstream (exchange.hpp).
  const bhttp::request_header<>& request() const { return req_; }
  bool keep_alive() const { return true; }  // (the connection outlives any one stream)
  // (as HTTP/1.1's parser says it: changed by read_body only, whatever arrives meanwhile)
  bool body_done() const { return body_done_; }
  deadline::entry& watch() { return *watch_; }
  const net::address& peer() const;
  std::string_view peer_str() const;
  std::string_view client_cert() const;
  static constexpr std::string_view scheme = is_tls<Stream> ? "https" : "http";
  std::string_view protocol() const { return "HTTP/2"; }
  asio::awaitable<bool> send_continue();
  bool start_body(bool) { return true; }
  asio::awaitable<error_code> read_body(char* data, std::size_t size, std::size_t& produced);
  asio::awaitable<outcome> send_local(unsigned status, bool keep_alive, std::string_view body = {},
                                      std::string_view extra = {}, std::string_view content_type = {});
  bool begin_response(response_parser& rp, std::string_view extra, bool may_keep_alive, response_start& out);
  char* inline_room(std::size_t) { return nullptr; }
  std::span<const asio::const_buffer> response_piece(bool head_too, const char* data, std::size_t n, bool last);
  asio::awaitable<std::tuple<error_code, std::size_t>> write(std::span<const asio::const_buffer> bufs);
  asio::awaitable<bool> wait_turn(std::chrono::milliseconds wait);
  bool client_gone() const { return reset_; }
  void set_trailers(std::span<const std::pair<std::string, std::string>> fields);
  void stream_idle(std::chrono::milliseconds idle) { stream_idle_ = idle; }
  asio::awaitable<bool> upgrade(upstream::connection&, response_parser&, std::string_view, std::function<void()>,
                                std::chrono::milliseconds, tunnel_stats&) {
    co_return false;  // (no WebSocket over HTTP/2: RFC 8441 is not offered)
  }

 private:
  friend class h2_connection<Stream>;
  // h2_stream.ipp: the head's fields as they are decoded, then the request.
  // False: stop (the head is far past http.max_header_bytes: the stream is reset).
  bool header(std::string_view name, std::string_view value);
  void head_done(bool end_stream);
  void data(const std::uint8_t* p, std::size_t n);
  void body_end() { in_end_ = true, wake(); }
  // The client reset it, or the connection ended: every wait of its ends.
  void gone();
  static ssize_t read_out(nghttp2_session*, std::int32_t, std::uint8_t* buf, std::size_t length,
                          std::uint32_t* flags, nghttp2_data_source* source, void*);
  // Submits the response head: with a body to come from read_out, or ending the stream.
  bool submit_head(bool body);
  asio::awaitable<error_code> sent_out();  // until out_ is taken by nghttp2 (or the stream is gone)
  void wake() { wake_.cancel(); }
  asio::awaitable<void> sleep();
  static void expired(void* self) { static_cast<h2_stream*>(self)->wake(); }
  std::chrono::milliseconds idle_timeout() const;

  conn_type& conn_;
  std::int32_t id_;
  typename std::list<h2_stream>::iterator self_;
  bhttp::request_header<> req_;
  std::size_t head_bytes_ = 0;  // decoded, as HTTP/2 counts them (RFC 9113 §6.5.2)
  std::string authority_, cookie_;
  bool has_method_ = false, has_path_ = false, has_host_ = false, trailers_ = false;
  std::string in_;  // body bytes received, not yet read (at most the stream's window)
  std::size_t in_off_ = 0;
  bool in_end_ = false;    // END_STREAM received
  bool body_done_ = false;  // ... and the body read whole by the exchange
  bool reset_ = false;    // gone: reset by the client, or the connection ended
  bool closed_ = false;   // nghttp2 closed it
  bool started_ = false;  // its exchange began (its head arrived whole)
  bool served_ = false;   // its exchange ended
  bool responded_ = false;  // its response head submitted
  bool ended_out_ = false;  // its response's END_STREAM sent
  // The response going out: its head, and the piece of its body nghttp2 has yet to take.
  std::string head_text_;
  h2_head head_;
  bool body_expected_ = true;
  std::string local_;  // a local answer (head and body)
  const char* out_ = nullptr;
  std::size_t out_left_ = 0;
  bool out_last_ = false;
  bool piece_head_ = false;
  std::array<asio::const_buffer, 1> piece_{};
  h2_head out_trailers_;  // sent after the body's last DATA (an HTTP/2 upstream's, gRPC's status)
  std::chrono::milliseconds stream_idle_{0};  // a long-lived stream's bound on its waits (else http.idle_timeout)
  asio::steady_timer wake_;
  deadline::board::watch watch_;
  exchange<h2_stream> ex_;  // (last: gone first)
};

// An HTTP/2 connection: the stream, its buffer and deadline (connection.hpp), nghttp2's
// session, and its streams.
template <class Stream>
class h2_connection {
 public:
  // `preread`: bytes read already (the preface, on the plain listener).
  h2_connection(worker_context& ctx, Stream stream, connection_slot slot, const net::address& peer,
                std::string_view preread);
  ~h2_connection();
  h2_connection(const h2_connection&) = delete;
  h2_connection& operator=(const h2_connection&) = delete;
  void set_client_cert(std::string subject) { client_cert_ = std::move(subject); }

  // Until the connection ends and its streams are done.
  asio::awaitable<void> run();

 private:
  friend class h2_stream<Stream>;
  asio::awaitable<void> reader();
  asio::awaitable<void> writer();
  asio::awaitable<void> serve(h2_stream<Stream>& s);
  // Answers a stream whose head cannot be served (400, 431), as a session rejects a head.
  asio::awaitable<void> reject(h2_stream<Stream>& s, unsigned status);
  void announce_settings();
  // nghttp2 has something to send: the writer goes on.
  void flush() { write_wanted_.cancel(); }
  // The connection's deadline, for what it waits for now.
  void rearm();
  // Ends the connection: GOAWAY with `code`, nothing more read.
  void terminate(std::uint32_t code, const char* why);
  void reset_sent();
  void drop(h2_stream<Stream>& s);
  bool frame(const nghttp2_frame& f);

  static int on_begin_headers(nghttp2_session*, const nghttp2_frame*, void*);
  static int on_header(nghttp2_session*, const nghttp2_frame*, const std::uint8_t*, std::size_t, const std::uint8_t*,
                       std::size_t, std::uint8_t, void*);
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame*, void*);
  static int on_data(nghttp2_session*, std::uint8_t, std::int32_t, const std::uint8_t*, std::size_t, void*);
  static int on_stream_close(nghttp2_session*, std::int32_t, std::uint32_t, void*);
  static int on_frame_send(nghttp2_session*, const nghttp2_frame*, void*);

  worker_context& ctx_;
  connection<Stream> conn_;
  net::address peer_;
  std::string peer_str_;
  std::string client_cert_;
  nghttp2_session* session_ = nullptr;
  std::list<h2_stream<Stream>> streams_;
  std::string out_;
  asio::steady_timer write_wanted_;
  asio::steady_timer streams_done_;
  bool writing_ = false;
  bool dead_ = false;       // the socket failed or the connection was ended: nothing more goes
  bool goaway_ = false;     // a GOAWAY went (drain, idle, or an error)
  bool in_header_block_ = false;
  bool reader_done_ = false;
  clock::time_point head_deadline_;   // the first request's head, from the connection's start
  clock::time_point block_deadline_;  // a header block's end, from its start
  clock::time_point idle_deadline_;   // idle since the last stream ended
  std::uint64_t streams_seen_ = 0;
  std::uint32_t announced_streams_ = 0, announced_head_ = 0;
  std::uint64_t data_frames_sent_ = 0, window_updates_ = 0;
  h2_bucket resets_{h2_limits::reset_burst};
  h2_bucket idle_frames_{h2_limits::idle_frames_burst};
};

}  // namespace fg::http::detail
