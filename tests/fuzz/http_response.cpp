// An upstream's response as the session reads it: http::response_parser (Beast's parser
// with the fields in a response_head) fed as a socket would deliver the bytes, beside
// Beast's own response_parser<buffer_body> fed the same; then the head sent downstream
// (build_downstream_response). Invariants: both parsers agree on every verdict (error,
// status, version, reason, the fields of each name in order, keep-alive, framing, every
// body byte), and what goes downstream (a status of 100 or more) parses as a response
// head with the same status.
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_input.hpp"
#include "http/forwarder.hpp"
#include "http/response_parser.hpp"

namespace http = boost::beast::http;

namespace {

// Where the two parsers part, named before the abort that reports it.
void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "http_response: %s\n", what);
  std::abort();
}

struct outcome {
  boost::beast::error_code ec;
  bool header_done = false;
  std::string body;
};

// The bytes given `step` at a time, as the session's feed() gives a parser what its
// buffer holds (a head stays in the buffer until the parser takes it whole); the body
// through a window of `window` bytes.
template <class Parser>
outcome run(Parser& p, std::string_view bytes, std::size_t step, std::size_t window, bool skip) {
  outcome o;
  p.header_limit(64 * 1024);
  p.body_limit(boost::none);
  p.skip(skip);
  boost::beast::flat_buffer buf;
  std::string room(window, '\0');
  for (std::size_t at = 0; at <= bytes.size();) {
    const auto n = std::min(step, bytes.size() - at);
    auto into = buf.prepare(n);
    if (n) std::memcpy(into.data(), bytes.data() + at, n);
    buf.commit(n);
    at += n;
    for (;;) {
      p.get().body().data = room.data();
      p.get().body().size = room.size();
      auto used = p.put(buf.data(), o.ec);
      buf.consume(used);
      o.body.append(room.data(), room.size() - p.get().body().size);
      if (o.ec == http::error::need_buffer) o.ec = {};
      if (o.ec || p.is_done() || used == 0) break;
    }
    if (o.ec == http::error::need_more) o.ec = {};
    if (o.ec || p.is_done()) break;
    if (at == bytes.size()) {
      p.get().body().data = room.data();
      p.get().body().size = room.size();
      if (p.is_header_done() && !p.is_done()) p.put_eof(o.ec);
      o.body.append(room.data(), room.size() - p.get().body().size);
      break;
    }
  }
  o.header_done = p.is_header_done();
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fg::fuzz::input in(data, size);
  const std::size_t step = 1 + in.byte() % 128;
  const std::size_t window = 1 + in.byte() % 64;
  const bool head = in.byte() % 4 == 0;
  const auto bytes = in.rest();

  fg::http::response_parser ours;
  http::response_parser<http::buffer_body> beasts;
  const auto a = run(ours, bytes, step, window, head);
  const auto b = run(beasts, bytes, step, window, head);
  require(a.ec == b.ec, "error");
  require(a.header_done == b.header_done, "head done");
  require(a.body == b.body, "body");
  if (!a.header_done) return 0;
  require(ours.is_done() == beasts.is_done() && ours.keep_alive() == beasts.keep_alive() &&
              ours.chunked() == beasts.chunked() && ours.content_length() == beasts.content_length(),
          "framing");
  const auto& h = ours.get();
  const auto& r = beasts.get();
  // (Beast's reason() stands in the obsolete phrase for an empty one: so does the head sent)
  std::string_view reason = h.reason();
  if (reason.empty()) {
    const auto o = http::obsolete_reason(http::int_to_status(h.result_int()));
    reason = {o.data(), o.size()};
  }
  require(h.result_int() == r.result_int() && h.version() == r.version() &&
              reason == std::string_view(r.reason().data(), r.reason().size()),
          "status line");
  // Fields of one name in the same order (Beast's container keeps them together, after
  // the first of their name; ours keeps the upstream's order), and as many in all.
  std::size_t count = 0;
  for (const auto& f : h) {
    ++count;
    std::vector<std::string_view> mine, theirs;
    for (const auto& g : h)
      if (fg::util::iequals(g.name_string(), f.name_string())) mine.push_back(g.value());
    for (const auto& g : r)
      if (fg::util::iequals(g.name_string(), f.name_string())) {
        require(g.name() == f.name(), "field id");
        theirs.emplace_back(g.value().data(), g.value().size());
      }
    require(mine == theirs, "fields");
    require(h[f.name_string()] == r[f.name_string()], "lookup by name");
  }
  require(count == static_cast<std::size_t>(std::distance(r.begin(), r.end())), "field count");

  // The head sent downstream, for a client of HTTP/1.1 and 1.0, parses back. (A status
  // below 100 never gets there: the session answers 502, read_past.)
  if (h.result_int() < 100) return 0;
  for (unsigned version : {11u, 10u}) {
    fg::http::response_context ctx;
    ctx.client_version = version;
    ctx.framing = ours.chunked() ? fg::http::response_framing::chunked : fg::http::response_framing::length;
    ctx.length = ours.content_length().value_or(0);
    std::string out;
    fg::http::build_downstream_response(h, ctx, out);
    http::response_parser<http::empty_body> back;
    back.eager(false);
    back.body_limit(boost::none);
    boost::beast::error_code ec;
    back.put(boost::asio::buffer(out.data(), out.size()), ec);
    require(!ec && back.is_header_done() && back.get().result_int() == h.result_int(), "head sent downstream");
  }
  return 0;
}
