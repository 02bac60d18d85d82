#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include "http/framing.hpp"

namespace bhttp = boost::beast::http;
using fg::http::body_framing;
using fg::http::check_request_framing;
using fg::http::head_scanner;

namespace {

using state = head_scanner::state;

// Feeds `data` to a fresh scanner one byte at a time (the buffer grows, as in the
// session), returning the first non-need_more state and the offset it was reached at.
std::pair<state, std::size_t> scan_bytewise(head_scanner& s, std::string_view data) {
  for (std::size_t n = 1; n <= data.size(); ++n) {
    auto st = s.scan(data.substr(0, n));
    if (st != state::need_more) return {st, n};
  }
  return {state::need_more, data.size()};
}

// A raw request head as Beast parses it for the session, then the framing check.
struct checked {
  std::string beast_error;  // empty when Beast accepted the head
  std::optional<body_framing> framing;
  std::string why;
  bool accepted() const { return beast_error.empty() && framing.has_value(); }
};

checked check_raw(std::string_view raw) {
  checked c;
  bhttp::request_parser<bhttp::empty_body> p;
  p.body_limit(boost::none);  // as the session does: the body is streamed, its size checked there
  p.eager(false);
  boost::system::error_code ec;
  p.put(boost::asio::buffer(raw.data(), raw.size()), ec);
  if (ec) {
    c.beast_error = ec.message();
    return c;
  }
  REQUIRE(p.is_header_done());
  const auto v = check_request_framing(p.get().base());
  if (v.accepted()) c.framing = v.framing;
  c.why = v.refused;
  return c;
}

// A header built directly, bypassing Beast's own parser checks.
bhttp::request_header<> make_header(unsigned version, std::initializer_list<std::pair<bhttp::field, std::string_view>> fields) {
  bhttp::request_header<> h;
  h.method(bhttp::verb::post);
  h.target("/");
  h.version(version);
  for (auto& [f, v] : fields) h.insert(f, v);
  return h;
}

std::string why_rejected(const bhttp::request_header<>& h) {
  const auto v = check_request_framing(h);
  return v.accepted() ? "<accepted>" : std::string(v.refused);
}

}  // namespace

// ---------------------------------------------------------------- head_scanner

TEST_CASE("head_scanner: complete head", "[framing]") {
  std::string head = "GET /x HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n";
  head_scanner s;
  CHECK(s.scan(head) == state::complete);
  CHECK(s.head_size() == head.size());

  SECTION("body bytes after the head are not part of it") {
    head_scanner s2;
    std::string with_body = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nab\r\n";
    CHECK(s2.scan(with_body) == state::complete);
    CHECK(s2.head_size() == with_body.size() - 4);
  }
  SECTION("request line only") {
    head_scanner s2;
    std::string_view h = "GET / HTTP/1.0\r\n\r\nGET / HTTP/1.0\r\n\r\n";
    CHECK(s2.scan(h) == state::complete);
    CHECK(s2.head_size() == 18);
  }
  SECTION("tabs and spaces inside lines are fine") {
    head_scanner s2;
    std::string_view h = "GET / HTTP/1.1\r\nHost: a\r\nX-A:\tb c \t\r\n\r\n";
    CHECK(s2.scan(h) == state::complete);
    CHECK(s2.head_size() == h.size());
  }
  SECTION("reset starts over") {
    s.reset();
    CHECK(s.head_size() == 0);
    CHECK(s.scan(std::string_view(head).substr(0, 17)) == state::need_more);
    CHECK(s.scan(head) == state::complete);
    CHECK(s.head_size() == head.size());
  }
}

TEST_CASE("head_scanner: need_more on partial input, fed byte by byte", "[framing]") {
  std::string head = "GET /x HTTP/1.1\r\nHost: example.com\r\nX-Empty:\r\n\r\n";
  head_scanner s;
  for (std::size_t n = 0; n < head.size(); ++n) {
    INFO("prefix length " << n);
    REQUIRE(s.scan(std::string_view(head).substr(0, n)) == state::need_more);
  }
  CHECK(s.scan(head) == state::complete);
  CHECK(s.head_size() == head.size());

  SECTION("a CR at the end of the buffer waits for the next byte") {
    head_scanner s2;
    CHECK(s2.scan("GET / HTTP/1.1\r") == state::need_more);
    CHECK(s2.scan("GET / HTTP/1.1\r\nHost: a\r") == state::need_more);
    CHECK(s2.scan("GET / HTTP/1.1\r\nHost: a\r\n\r") == state::need_more);
    CHECK(s2.scan("GET / HTTP/1.1\r\nHost: a\r\n\r\n") == state::complete);
    CHECK(s2.head_size() == 27);
  }
  SECTION("whole head in larger pieces") {
    head_scanner s2;
    CHECK(s2.scan(std::string_view(head).substr(0, 10)) == state::need_more);
    CHECK(s2.scan(std::string_view(head).substr(0, 30)) == state::need_more);
    CHECK(s2.scan(head + "trailing") == state::complete);
    CHECK(s2.head_size() == head.size());
  }
}

TEST_CASE("head_scanner: rejects what a gateway must not forward", "[framing]") {
  struct bad_case {
    std::string_view name;
    std::string head;
    std::string_view error;
  };
  using namespace std::string_literals;
  const bad_case cases[] = {
      {"bare LF ending the request line", "GET / HTTP/1.1\nHost: a\r\n\r\n", "bare LF in request head"},
      {"bare LF ending a header", "GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n", "bare LF in request head"},
      {"bare LF as the blank line", "GET / HTTP/1.1\r\nHost: a\r\n\n", "bare LF in request head"},
      {"bare LF first", "\nGET / HTTP/1.1\r\n\r\n", "bare LF in request head"},
      {"bare CR in the request line", "GET /\r HTTP/1.1\r\nHost: a\r\n\r\n", "bare CR in request head"},
      {"bare CR in a header value", "GET / HTTP/1.1\r\nHost: a\rX: y\r\n\r\n", "bare CR in request head"},
      {"CR CR LF", "GET / HTTP/1.1\r\r\nHost: a\r\n\r\n", "bare CR in request head"},
      {"NUL in a header value", "GET / HTTP/1.1\r\nHost: a\0b\r\n\r\n"s, "NUL byte in request head"},
      {"NUL in the request line", "GET /\0 HTTP/1.1\r\n\r\n"s, "NUL byte in request head"},
      {"obs-fold with SP", "GET / HTTP/1.1\r\nX-A: b\r\n c\r\nHost: a\r\n\r\n", "obsolete line folding in request head"},
      {"obs-fold with HTAB", "GET / HTTP/1.1\r\nX-A: b\r\n\tc\r\nHost: a\r\n\r\n",
       "obsolete line folding in request head"},
      {"header line starting with SP", "GET / HTTP/1.1\r\n Host: a\r\n\r\n", "obsolete line folding in request head"},
      {"SP before the request line", " GET / HTTP/1.1\r\nHost: a\r\n\r\n", "whitespace before the request line"},
      {"HTAB before the request line", "\tGET / HTTP/1.1\r\nHost: a\r\n\r\n", "whitespace before the request line"},
      {"empty request line", "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", "empty request line"},
      {"only CRLFCRLF", "\r\n\r\n", "empty request line"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    head_scanner whole;
    CHECK(whole.scan(c.head) == state::bad);
    CHECK(std::string_view(whole.error()) == c.error);

    head_scanner bytewise;
    auto [st, at] = scan_bytewise(bytewise, c.head);
    CHECK(st == state::bad);
    CHECK(std::string_view(bytewise.error()) == c.error);
  }
}

TEST_CASE("head_scanner: bad input is detected as soon as it is seen", "[framing]") {
  head_scanner s;
  CHECK(s.scan("GET / HTTP/1.1\r\nHost: a\r") == state::need_more);
  CHECK(s.scan("GET / HTTP/1.1\r\nHost: a\rX") == state::bad);

  head_scanner s2;
  auto [st, at] = scan_bytewise(s2, "GET / HTTP/1.1\r\nX: y\r\n\tz\r\n\r\n");
  CHECK(st == state::bad);
  CHECK(at == 23);  // stops on the HTAB at offset 22, right after the second CRLF
}

// ---------------------------------------------------------------- check_request_framing

TEST_CASE("check_request_framing: requests without a body", "[framing]") {
  for (std::string_view raw : {"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
                               "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
                               "DELETE /x HTTP/1.1\r\nHost: a\r\n\r\n",
                               "GET / HTTP/1.0\r\n\r\n",  // Host is optional in 1.0
                               "GET / HTTP/1.0\r\nHost: a\r\n\r\n"}) {
    INFO(raw);
    auto c = check_raw(raw);
    REQUIRE(c.accepted());
    CHECK(c.framing->type == body_framing::kind::none);
    CHECK(c.framing->length == 0);
  }
}

TEST_CASE("check_request_framing: Content-Length bodies", "[framing]") {
  auto c = check_raw("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n");
  REQUIRE(c.accepted());
  CHECK(c.framing->type == body_framing::kind::length);
  CHECK(c.framing->length == 5);

  c = check_raw("PUT / HTTP/1.0\r\nContent-Length: 123456789\r\n\r\n");
  REQUIRE(c.accepted());
  CHECK(c.framing->type == body_framing::kind::length);
  CHECK(c.framing->length == 123456789);

  c = check_raw("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 999999999999999999\r\n\r\n");
  REQUIRE(c.accepted());
  CHECK(c.framing->length == 999999999999999999ull);

  SECTION("identical repeated Content-Length is accepted") {
    c = check_raw("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n");
    REQUIRE(c.accepted());
    CHECK(c.framing->type == body_framing::kind::length);
    CHECK(c.framing->length == 5);

    auto h = make_header(11, {{bhttp::field::host, "a"}, {bhttp::field::content_length, "7"},
                              {bhttp::field::content_length, " 7 "}});
    const auto v = check_request_framing(h);
    REQUIRE(v.accepted());
    CHECK(v.framing.type == body_framing::kind::length);
    CHECK(v.framing.length == 7);
  }
}

TEST_CASE("check_request_framing: chunked bodies", "[framing]") {
  for (std::string_view raw : {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
                               "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n",
                               "POST / HTTP/1.1\r\nTransfer-Encoding: CHUNKED \r\nHost: a\r\n\r\n"}) {
    INFO(raw);
    auto c = check_raw(raw);
    REQUIRE(c.accepted());
    CHECK(c.framing->type == body_framing::kind::chunked);
    CHECK(c.framing->length == 0);
  }
}

TEST_CASE("check_request_framing: both Content-Length and Transfer-Encoding", "[framing]") {
  // Beast refuses these itself, whichever comes first.
  auto c = check_raw("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n");
  CHECK_FALSE(c.accepted());
  CHECK_FALSE(c.beast_error.empty());
  c = check_raw("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n");
  CHECK_FALSE(c.accepted());
  CHECK_FALSE(c.beast_error.empty());
  // And so does check_request_framing.
  CHECK(why_rejected(make_header(11, {{bhttp::field::host, "a"},
                                      {bhttp::field::content_length, "5"},
                                      {bhttp::field::transfer_encoding, "chunked"}})) ==
        "both Content-Length and Transfer-Encoding");
  CHECK(why_rejected(make_header(11, {{bhttp::field::host, "a"},
                                      {bhttp::field::transfer_encoding, "chunked"},
                                      {bhttp::field::content_length, "0"}})) ==
        "both Content-Length and Transfer-Encoding");
}

TEST_CASE("check_request_framing: Transfer-Encoding other than exactly chunked", "[framing]") {
  for (std::string_view te : {"gzip, chunked", "identity", "chunked, chunked", "gzip", "chunked;q=1", "chunked,",
                              "x-chunked", "deflate,chunked"}) {
    INFO("Transfer-Encoding: " << te);
    std::string raw = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: " + std::string(te) + "\r\n\r\n";
    auto c = check_raw(raw);
    CHECK_FALSE(c.accepted());
    if (c.beast_error.empty()) CHECK(c.why == "unsupported Transfer-Encoding");
    CHECK(why_rejected(make_header(11, {{bhttp::field::host, "a"}, {bhttp::field::transfer_encoding, te}})) ==
          "unsupported Transfer-Encoding");
  }
  // Accepted by Beast (its last coding is chunked), refused here.
  auto c = check_raw("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
  CHECK(c.beast_error.empty());
  CHECK(c.why == "unsupported Transfer-Encoding");
  CHECK(why_rejected(make_header(11, {{bhttp::field::host, "a"}, {bhttp::field::transfer_encoding, ""}})) ==
        "unsupported Transfer-Encoding");
}

TEST_CASE("check_request_framing: two Transfer-Encoding headers", "[framing]") {
  for (std::string_view raw : {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                               "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"}) {
    INFO(raw);
    CHECK_FALSE(check_raw(raw).accepted());
  }
  CHECK(why_rejected(make_header(11, {{bhttp::field::host, "a"},
                                      {bhttp::field::transfer_encoding, "chunked"},
                                      {bhttp::field::transfer_encoding, "chunked"}})) == "repeated Transfer-Encoding");
}

TEST_CASE("check_request_framing: bad Content-Length", "[framing]") {
  SECTION("differing values") {
    auto c = check_raw("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n");
    CHECK_FALSE(c.accepted());
    CHECK_FALSE(c.beast_error.empty());  // Beast: multiple Content-Length
    CHECK(why_rejected(make_header(11, {{bhttp::field::host, "a"},
                                        {bhttp::field::content_length, "5"},
                                        {bhttp::field::content_length, "6"}})) == "conflicting Content-Length");
    CHECK(why_rejected(make_header(11, {{bhttp::field::host, "a"},
                                        {bhttp::field::content_length, "0"},
                                        {bhttp::field::content_length, "10"}})) == "conflicting Content-Length");
  }
  SECTION("not a number") {
    for (std::string_view v : {"abc", "+5", "-1", "5a", "0x10", "1 2", "1.0", "99999999999999999999"}) {
      INFO("Content-Length: " << v);
      std::string raw = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::string(v) + "\r\n\r\n";
      CHECK_FALSE(check_raw(raw).accepted());
      CHECK(why_rejected(make_header(11, {{bhttp::field::host, "a"}, {bhttp::field::content_length, v}})) ==
            "invalid Content-Length");
    }
    CHECK(why_rejected(make_header(11, {{bhttp::field::host, "a"}, {bhttp::field::content_length, ""}})) ==
          "invalid Content-Length");
  }
  SECTION("a list, even of equal values, is refused") {
    auto c = check_raw("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n");
    CHECK_FALSE(c.accepted());
    if (c.beast_error.empty()) CHECK(c.why == "invalid Content-Length");
  }
  SECTION("more than 18 digits is refused") {
    auto c = check_raw("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000000000000000\r\n\r\n");
    CHECK_FALSE(c.accepted());
    if (c.beast_error.empty()) CHECK(c.why == "invalid Content-Length");
    CHECK(why_rejected(make_header(11, {{bhttp::field::host, "a"},
                                        {bhttp::field::content_length, "0000000000000000005"}})) ==
          "invalid Content-Length");
  }
}

TEST_CASE("check_request_framing: Transfer-Encoding in HTTP/1.0", "[framing]") {
  auto c = check_raw("POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
  CHECK_FALSE(c.accepted());
  if (c.beast_error.empty()) CHECK(c.why == "Transfer-Encoding in an HTTP/1.0 request");
  CHECK(why_rejected(make_header(10, {{bhttp::field::transfer_encoding, "chunked"}})) ==
        "Transfer-Encoding in an HTTP/1.0 request");
  CHECK(why_rejected(make_header(11, {{bhttp::field::host, "a"}, {bhttp::field::transfer_encoding, "chunked"}})) ==
        "<accepted>");
}

TEST_CASE("check_request_framing: Host", "[framing]") {
  auto c = check_raw("GET / HTTP/1.1\r\n\r\n");
  CHECK_FALSE(c.accepted());
  if (c.beast_error.empty()) CHECK(c.why == "missing Host");

  c = check_raw("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
  CHECK_FALSE(c.accepted());
  if (c.beast_error.empty()) CHECK(c.why == "repeated Host");

  c = check_raw("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n");
  CHECK_FALSE(c.accepted());

  c = check_raw("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n");
  CHECK_FALSE(c.accepted());

  CHECK(why_rejected(make_header(11, {})) == "missing Host");
  CHECK(why_rejected(make_header(11, {{bhttp::field::host, "a"}, {bhttp::field::host, "a"}})) == "repeated Host");
  CHECK(why_rejected(make_header(10, {{bhttp::field::host, "a"}, {bhttp::field::host, "b"}})) == "repeated Host");
  CHECK(why_rejected(make_header(10, {})) == "<accepted>");
  CHECK(why_rejected(make_header(11, {{bhttp::field::host, ""}})) == "<accepted>");  // empty Host is allowed
}

TEST_CASE("head_scanner: a request line or field that cannot become valid is refused at once", "[framing]") {
  struct bad_case {
    std::string head;
    std::size_t decided_at;  // bytes needed to decide
  };
  using namespace std::string_literals;
  const bad_case cases[] = {
      {"GET /\r\n", 7},                      // HTTP/0.9: no version, no blank line will come
      {"GET / \r\n", 8},
      {"GET\r\n", 5},
      {"GET / HTTP/2.0\r\n", 12},
      {"GET / HTTP/1.1x\r\n", 15},
      {"GET / http/1.1\r\n", 7},
      {"\x16\x03\x01\x02\x00"s, 1},          // a TLS ClientHello on the plain port
      {"G(T / HTTP/1.1\r\n", 2},
      {"GET  / HTTP/1.1\r\n", 5},
      {"GET /\x01 HTTP/1.1\r\n"s, 6},
      {"GET / HTTP/1.1\r\nHost a\r\n", 21},  // no colon: the space is no name byte
      {"GET / HTTP/1.1\r\nHost : a\r\n", 21},
      {"GET / HTTP/1.1\r\n: a\r\n", 17},
      {"GET / HTTP/1.1\r\nHost\r\n", 22},
      {"GET / HTTP/1.1\r\nX: a\x01\r\n"s, 21},
      {"GET / HTTP/1.1\r\nX: a\x7f\r\n"s, 21},
  };
  for (const auto& c : cases) {
    INFO(c.head);
    head_scanner s;
    auto [st, at] = scan_bytewise(s, c.head);
    CHECK(st == state::bad);
    CHECK(at == c.decided_at);
  }
  head_scanner ok;
  CHECK(ok.scan("PATCH /a?b=c HTTP/1.0\r\nX-Y_z: v\r\n\r\n") == state::complete);
}

TEST_CASE("chunk_vetter: framing followed as bytes arrive", "[framing]") {
  using fg::http::chunk_vetter;
  using vs = chunk_vetter::state;
  auto bytewise = [](std::string_view body) {
    chunk_vetter v;
    for (std::size_t i = 0; i < body.size(); ++i) {
      auto st = v.feed(body.substr(i, 1));
      if (st != vs::more) return std::pair{st, i + 1};
    }
    return std::pair{vs::more, body.size()};
  };
  SECTION("valid bodies end exactly at their last byte, whole or byte by byte") {
    for (std::string_view body : {"0\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n", "5;a=b;c=\"d\"\r\nhello\r\n0\r\n\r\n",
                                  "A \t;x\r\n0123456789\r\n0\r\nX-T: done\r\nY: z\r\n\r\n", "00000\r\n\r\n"}) {
      INFO(body);
      auto [st, at] = bytewise(body);
      CHECK(st == vs::done);
      CHECK(at == body.size());
      chunk_vetter whole;
      CHECK(whole.feed(std::string(body) + "GET / HTTP/1.1\r\n") == vs::done);
    }
  }
  SECTION("split anywhere") {
    std::string body = "1a\r\n" + std::string(26, 'x') + "\r\n3\r\nabc\r\n0\r\n\r\n";
    for (std::size_t cut = 0; cut <= body.size(); ++cut) {
      chunk_vetter v;
      auto first = v.feed(std::string_view(body).substr(0, cut));
      if (cut < body.size()) {
        CHECK(first == vs::more);
        CHECK(v.feed(std::string_view(body).substr(cut)) == vs::done);
      } else {
        CHECK(first == vs::done);
      }
    }
  }
  SECTION("malformed framing is refused at the byte that decides it") {
    struct bad_case {
      std::string_view body;
      std::size_t at;
    };
    const bad_case cases[] = {
        {"5\nhello\n0\n\n", 2},  // bare LF chunk lines
        {"5;ext\nhello", 6},
        {"5\r\nhello\n", 9},     // chunk data followed by a bare LF
        {"5\r\nhelloX", 9},
        {"x\r\n", 1},
        {"\r\n", 1},
        {"5 x\r\n", 3},
        {"5\rx", 3},
        {"1000000000000000\r\n", 16},  // 16 hex digits: more than any body
        {"0\r\nX-T: a\nY", 10},         // a bare LF in the trailers
        {"0\r\n\n", 4},
        {"0\r\n\rx", 5},
        {"0\r\n: x\r\n", 4},
        {"5;a\x01\r\n", 4},
    };
    for (const auto& c : cases) {
      INFO(c.body);
      auto [st, at] = bytewise(c.body);
      CHECK(st == vs::bad);
      CHECK(at == c.at);
    }
  }
  SECTION("extensions and trailers are bounded") {
    chunk_vetter v;
    CHECK(v.feed("5;" + std::string(5000, 'a')) == vs::bad);
    chunk_vetter t;
    CHECK(t.feed("0\r\nX: " + std::string(20000, 'a')) == vs::bad);
  }
}
