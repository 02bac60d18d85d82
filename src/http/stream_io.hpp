#pragma once
// What both sides of an exchange read and write with: a downstream connection
// (session_impl.hpp) and the exchange's upstream half (exchange_upstream.ipp). Feeding
// a Beast parser from a buffer and a stream, the completion token of a read, the body
// block's size, and a timeout told from a cancel. Beast-heavy: include only from the
// session's and the exchange's files.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string_view>
#include <type_traits>

#include "deadline/board.hpp"
#include "http/connection.hpp"
#include "http/framing.hpp"
#include "upstream/pool.hpp"
#include "util/asio.hpp"

namespace fg::http::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using clock = std::chrono::steady_clock;
using util::deferred_tuple;

// Body bytes move through one block of this size per exchange, in both directions.
constexpr std::size_t body_chunk = 32 * 1024;
static_assert(body_chunk == 32 * 1024, "http::worker_context::bodies lends blocks of this size");

// What a connection does after an exchange: read its next request, close it (lingering:
// the client may still be sending), or nothing more (it is closed or gone); park: the
// connection idles between requests (a session's own).
enum class outcome { keep_going, close, closed, park, h2 };

// What a buffer holds, as text.
inline std::string_view bytes_of(const beast::flat_buffer& b) {
  return {static_cast<const char*>(b.data().data()), b.size()};
}

// Maps a cancelled wait whose deadline passed to a timeout.
inline error_code timed(const deadline::entry& e, error_code ec) {
  return ec && e.expired() ? error_code(beast::error::timeout) : ec;
}

// The completion token for a read of the stream's own: deferred (no coroutine frame) on
// a socket; Beast's test stream predates deferred, and is awaited through use_awaitable.
template <class Stream>
constexpr auto read_token() {
  if constexpr (is_socket<Stream> || is_tls<Stream> || std::is_same_v<Stream, upstream::connection>)
    return deferred_tuple;
  else return asio::as_tuple(asio::use_awaitable);
}

// An optional T kept on the heap, so that an idle connection can give its storage
// back (release()) while a busy one reuses it request after request.
template <class T>
class lazy_optional {
 public:
  T& emplace() {
    if (!box_) box_ = std::make_unique<std::optional<T>>();
    return box_->emplace();
  }
  void release() { box_.reset(); }
  explicit operator bool() const { return box_ && box_->has_value(); }
  T* operator->() { return &**box_; }
  const T* operator->() const { return &**box_; }
  T& operator*() { return **box_; }
  const T& operator*() const { return **box_; }

 private:
  std::unique_ptr<std::optional<T>> box_;
};

// Feeds buffered bytes to the parser without suspending. A result when done, nullopt
// when the parser needs bytes from the socket. Body mode (`want_head` false,
// buffer_body): done when some body bytes were produced, the body buffer is full, or
// the message is complete. Head mode: done when the head is parsed.
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

// Feeds already-buffered bytes to a parser, reading from the socket only when the
// parser needs more (see feed). With `vet`, each byte read is also followed through a
// chunked body's framing as it arrives, so a malformed one fails at once instead of
// when the parser gives up.
template <class Stream, class Parser>
asio::awaitable<error_code> read_into(deadline::entry& e, Stream& s, beast::flat_buffer& b, Parser& p,
                                      std::chrono::milliseconds timeout, std::size_t& produced, bool want_head,
                                      chunk_vetter* vet = nullptr) {
  std::size_t start = want_head ? 0 : p.get().body().size;
  produced = 0;
  for (;;) {
    if (auto r = feed(b, p, start, produced, want_head)) co_return *r;
    e.arm(timeout);
    auto space = std::min<std::size_t>(b.max_size() - b.size(), 65536);
    auto [ec, n] = co_await s.async_read_some(b.prepare(space), read_token<Stream>());
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

// A chunked body's framing is followed from its first byte: those already buffered
// behind the head first (false if they are malformed), then each read's (read_into).
inline bool start_vetting(chunk_vetter& v, const beast::flat_buffer& buffered) {
  v.reset();
  return v.feed(bytes_of(buffered)) != chunk_vetter::state::bad;
}

}  // namespace fg::http::detail
