#pragma once
// Beast-heavy: include only where responses are read (the session, its tests).
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/buffer_body.hpp>

#include <algorithm>
#include <cstring>

#include "http/response_head.hpp"

namespace fg::http {

// What an upstream response parses into: its head, and the window its body is written
// into (Beast's buffer_body: the caller points `data` at room for `size` bytes).
struct response_message : response_head {
  boost::beast::http::buffer_body::value_type& body() { return body_; }
  const boost::beast::http::buffer_body::value_type& body() const { return body_; }
  boost::beast::http::buffer_body::value_type body_;
};

// Beast's HTTP/1 parser (which validates every byte and decides the framing: Content-Length,
// chunked, the end of a body delimited by the close), with the fields written into a
// response_head instead of a basic_fields: the same parse as
// beast::http::response_parser<buffer_body>, without its node per field.
class response_parser final : public boost::beast::http::basic_parser<false> {
  using error_code = boost::system::error_code;
  using string_view = boost::beast::string_view;

 public:
  response_message& get() { return m_; }
  const response_message& get() const { return m_; }

 private:
  void on_request_impl(boost::beast::http::verb, string_view, string_view, int, error_code&) override {}
  void on_response_impl(int code, string_view reason, int version, error_code&) override {
    m_.start(static_cast<unsigned>(code), static_cast<unsigned>(version), {reason.data(), reason.size()});
  }
  void on_field_impl(boost::beast::http::field id, string_view name, string_view value, error_code&) override {
    m_.add(id, {name.data(), name.size()}, {value.data(), value.size()});
  }
  void on_header_impl(error_code& ec) override { ec = {}; }
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code& ec) override { ec = {}; }
  std::size_t on_body_impl(string_view body, error_code& ec) override { return take(body, ec); }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code& ec) override { ec = {}; }
  std::size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) override { return take(body, ec); }
  void on_finish_impl(error_code& ec) override { ec = {}; }

  // As buffer_body's reader: what fits in the window, need_buffer when it is full or unset.
  std::size_t take(string_view body, error_code& ec) {
    auto& b = m_.body();
    if (!b.data) {
      ec = boost::beast::http::error::need_buffer;
      return 0;
    }
    const std::size_t n = std::min(b.size, body.size());
    if (n) std::memcpy(b.data, body.data(), n);
    b.data = static_cast<char*>(b.data) + n;
    b.size -= n;
    if (n == body.size()) ec = {};
    else ec = boost::beast::http::error::need_buffer;
    return n;
  }

  response_message m_;
};

}  // namespace fg::http
