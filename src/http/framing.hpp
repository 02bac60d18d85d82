#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include <boost/beast/http/message.hpp>

namespace fg::http {

// Incremental scan of raw request-head bytes, run before Beast parses them, for what
// Beast tolerates but a gateway must not forward: bare LF, bare CR, obs-fold, NUL.
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
  std::size_t pos_ = 0;
  std::size_t line_ = 0;        // lines completed so far
  std::size_t line_start_ = 0;  // offset of the current line
  std::size_t end_ = 0;
  const char* error_ = "";
};

// How the request body is framed, after checking that the framing is unambiguous.
struct body_framing {
  enum class kind { none, length, chunked } type = kind::none;
  std::uint64_t length = 0;
};

// RFC 9112 §6 checks that Beast leaves to the application. Returns nullopt and sets
// `why` when the request must be rejected with 400 and the connection closed.
std::optional<body_framing> check_request_framing(const boost::beast::http::request_header<>& h, const char*& why);

}  // namespace fg::http
