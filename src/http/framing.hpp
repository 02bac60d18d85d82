#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include <boost/beast/http/message.hpp>

namespace fg::http {

// Incremental scan of raw request-head bytes, run before Beast parses them, for what
// Beast tolerates but a gateway must not forward (bare LF, bare CR, obs-fold, NUL,
// control bytes) and for what would otherwise wait for a timeout: each byte is judged
// as it arrives, so a request line without an HTTP version ("GET /", HTTP/0.9), a
// method or field name that is no token, or a stray TLS handshake is refused at once.
class head_scanner {
 public:
  enum class state { need_more, complete, bad };

  // `data` is the whole buffered input from the start of the head; only bytes not yet
  // scanned are looked at. On `complete`, head_size() is the length including CRLFCRLF.
  state scan(std::string_view data);
  std::size_t head_size() const { return end_; }
  const char* error() const { return error_; }
  void reset() { *this = head_scanner{}; }

 private:
  enum class phase : unsigned char { method, target, version, name, value };
  state fail(const char* why) {
    error_ = why;
    return state::bad;
  }
  std::size_t pos_ = 0;
  std::size_t line_ = 0;        // lines completed so far
  std::size_t line_start_ = 0;  // offset of the current line
  std::size_t mark_ = 0;        // where the current part of the request line began
  std::size_t end_ = 0;
  phase phase_ = phase::method;
  const char* error_ = "";
};

// Follows a chunked body's framing byte by byte as the bytes arrive (RFC 9112 §7.1),
// beside the parser that decodes it: a chunk line ending in a bare LF, a size that is
// no hex number, chunk data not followed by CRLF, or oversized extensions and trailers
// are refused as soon as the deciding byte is seen, instead of waiting for a CRLF that
// never comes. Bytes past the end of the body are not looked at (a pipelined request).
class chunk_vetter {
 public:
  enum class state { more, done, bad };
  // Looks at the next bytes of the body; `done` once the last chunk and trailers end.
  state feed(std::string_view bytes);
  const char* error() const { return error_; }
  void reset() { *this = chunk_vetter{}; }

 private:
  enum class phase : unsigned char { size, size_ws, ext, size_lf, data, data_cr, data_lf, trailer_start, trailer,
                                     trailer_lf, end_lf, done };
  state fail(const char* why) {
    error_ = why;
    phase_ = phase::done;
    return state::bad;
  }
  phase phase_ = phase::size;
  unsigned digits_ = 0;
  std::uint64_t size_ = 0;
  std::size_t line_bytes_ = 0;     // of the current chunk line (extensions)
  std::size_t trailer_bytes_ = 0;  // of all trailer lines
  const char* error_ = "";
};

// How the request body is framed, after checking that the framing is unambiguous.
struct body_framing {
  enum class kind { none, length, chunked } type = kind::none;
  std::uint64_t length = 0;
};

// What check_request_framing found: the body's framing, or why the request must be
// rejected with 400 and the connection closed.
struct framing_verdict {
  body_framing framing;
  std::string_view refused;  // empty: accepted
  bool accepted() const { return refused.empty(); }
};

// RFC 9112 §6 checks that Beast leaves to the application.
framing_verdict check_request_framing(const boost::beast::http::request_header<>& h);

}  // namespace fg::http
