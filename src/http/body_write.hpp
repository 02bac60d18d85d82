#pragma once
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/http/chunk_encode.hpp>

#include <array>
#include <optional>
#include <span>
#include <string_view>

namespace fg::http {

// The buffers of one write of a body, either way (request body up, response body down):
// a head before it (if any), the piece (in Beast's chunk framing when `chunked`), and
// the last chunk when `last` (chunked only). One per session, reused write after write:
// a write's buffers live here until it completes, and never in a coroutine frame.
class body_write {
 public:
  std::span<const boost::asio::const_buffer> assign(std::string_view head, const char* data, std::size_t n,
                                                    bool chunked, bool last) {
    count_ = 0;
    header_.reset();
    if (!head.empty()) add(boost::asio::buffer(head));
    if (n && chunked) {
      header_.emplace(n);
      add_all(*header_);
    }
    if (n) add(boost::asio::buffer(data, n));
    if (n && chunked) add_all(crlf_);
    if (last && chunked) add_all(last_);
    return {bufs_.data(), count_};
  }

 private:
  template <class Buffers>
  void add_all(const Buffers& b) {
    for (auto x : boost::beast::buffers_range_ref(b)) add(x);
  }
  void add(boost::asio::const_buffer b) { bufs_[count_++] = b; }

  std::optional<boost::beast::http::chunk_header> header_;
  boost::beast::http::chunk_crlf crlf_;
  boost::beast::http::chunk_last<boost::beast::http::chunk_crlf> last_ = boost::beast::http::make_chunk_last();
  std::array<boost::asio::const_buffer, 10> bufs_;
  std::size_t count_ = 0;
};

}  // namespace fg::http
