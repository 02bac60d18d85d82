// The request-head scanner, fed in pieces as a socket would deliver them; a head it
// accepts goes on to Beast's parser and the framing checks; a chunked body's bytes to
// the chunk vetter. Invariants: the scanner's verdict does not depend on how the bytes
// were split, and a completed head ends in CRLFCRLF at head_size().
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <cstdlib>
#include <string>

#include "fuzz_input.hpp"
#include "http/framing.hpp"

namespace http = boost::beast::http;
using fg::http::chunk_vetter;
using fg::http::head_scanner;

namespace {

head_scanner::state scan_in_pieces(std::string_view data, unsigned step, head_scanner& s) {
  auto st = head_scanner::state::need_more;
  for (std::size_t end = 0; end < data.size() && st == head_scanner::state::need_more;) {
    end = std::min(data.size(), end + step);
    st = s.scan(data.substr(0, end));
  }
  return st;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fg::fuzz::input in(data, size);
  const unsigned step = 1 + in.byte() % 64;
  const auto bytes = in.rest();
  head_scanner whole, pieces;
  const auto a = whole.scan(bytes);
  const auto b = scan_in_pieces(bytes, step, pieces);
  if (a != head_scanner::state::need_more && b != head_scanner::state::need_more && a != b) std::abort();
  if (a != head_scanner::state::complete) return 0;
  if (b == head_scanner::state::complete && whole.head_size() != pieces.head_size()) std::abort();
  const auto n = whole.head_size();
  if (n < 4 || n > bytes.size() || bytes.substr(n - 4, 4) != "\r\n\r\n") std::abort();
  // What the scanner lets through has no byte Beast would tolerate and an upstream
  // might read differently: no control byte but HTAB, every CR followed by LF and
  // every LF preceded by CR, no obs-fold (a line starting with SP or HTAB).
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c == '\r' && (i + 1 >= n || bytes[i + 1] != '\n')) std::abort();
    if (c == '\n' && (i == 0 || bytes[i - 1] != '\r')) std::abort();
    if (c == '\n' && i + 1 < n && (bytes[i + 1] == ' ' || bytes[i + 1] == '\t')) std::abort();
    if ((c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f) std::abort();
  }

  http::request_parser<http::empty_body> parser;
  parser.header_limit(64 * 1024);
  parser.eager(false);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(bytes.data(), n), ec);
  if (ec || !parser.is_header_done()) return 0;
  const auto verdict = fg::http::check_request_framing(parser.get().base());
  if (verdict.accepted() && verdict.framing.type == fg::http::body_framing::kind::chunked) {
    chunk_vetter v;
    auto body = bytes.substr(n);
    for (std::size_t at = 0; at < body.size(); at += step)
      if (v.feed(body.substr(at, step)) != chunk_vetter::state::more) break;
  }
  return 0;
}
