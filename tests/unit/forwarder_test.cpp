#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "http/forwarder.hpp"
#include "http/response_parser.hpp"
#include "http/responses.hpp"

namespace bhttp = boost::beast::http;
using fg::http::body_framing;
using fg::http::build_downstream_response;
using fg::http::build_upstream_request;
using fg::http::forward_context;
using fg::http::response_context;
using fg::http::response_framing;

namespace {

using lines = std::vector<std::string>;

// A produced head split into its lines (start line first); every line must end in
// CRLF and hold no other CR or LF. `body` is what follows the blank line.
struct head {
  lines l;
  std::string body;
};

head split_head(std::string_view s) {
  head h;
  auto end = s.find("\r\n\r\n");
  REQUIRE(end != std::string_view::npos);
  h.body = std::string(s.substr(end + 4));
  auto text = s.substr(0, end + 2);
  while (!text.empty()) {
    auto eol = text.find("\r\n");
    REQUIRE(eol != std::string_view::npos);
    auto line = text.substr(0, eol);
    REQUIRE(line.find_first_of("\r\n") == std::string_view::npos);
    h.l.emplace_back(line);
    text.remove_prefix(eol + 2);
  }
  return h;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// Header lines whose name is `name` (case-insensitive), as "Name: value".
lines named(const head& h, std::string_view name) {
  lines out;
  for (std::size_t i = 1; i < h.l.size(); ++i) {
    auto colon = h.l[i].find(':');
    if (colon != std::string::npos && iequals(std::string_view(h.l[i]).substr(0, colon), name)) out.push_back(h.l[i]);
  }
  return out;
}

// A head parsed as the session has it: a request's by Beast's parser, a response's by
// the session's response_parser.
template <class Parser>
auto parse_head(std::string_view raw) {
  Parser p;
  p.eager(false);
  boost::system::error_code ec;
  p.put(boost::asio::buffer(raw.data(), raw.size()), ec);
  INFO(raw);
  REQUIRE_FALSE(ec);
  REQUIRE(p.is_header_done());
  return p.get();
}
bhttp::request_header<> parse_request(std::string_view raw) {
  return parse_head<bhttp::request_parser<bhttp::empty_body>>(raw).base();
}
fg::http::response_head parse_response(std::string_view raw) {
  return parse_head<fg::http::response_parser>(raw);
}

// The produced upstream request head must itself parse cleanly.
void require_parses_as_request(std::string_view out) {
  bhttp::request_parser<bhttp::empty_body> p;
  p.eager(false);
  boost::system::error_code ec;
  p.put(boost::asio::buffer(out.data(), out.size()), ec);
  INFO(out);
  REQUIRE_FALSE(ec);
  REQUIRE(p.is_header_done());
}

forward_context ctx_untrusted() {
  forward_context c;
  c.peer_ip = "10.0.0.9";
  c.peer_trusted = false;
  c.request_id = "gen-id";
  return c;
}

std::string upstream(std::string_view raw, const forward_context& ctx) {
  std::string out;
  build_upstream_request(parse_request(raw), ctx, out);
  require_parses_as_request(out);
  return out;
}

std::string downstream(std::string_view raw, const response_context& ctx) {
  std::string out;
  build_downstream_response(parse_response(raw), ctx, out);
  return out;
}

}  // namespace

// ---------------------------------------------------------------- build_upstream_request

TEST_CASE("build_upstream_request: hop-by-hop headers removed, Host kept", "[forwarder]") {
  auto out = upstream(
      "GET /p?q=1 HTTP/1.1\r\n"
      "Host: example.com\r\n"
      "Connection: keep-alive\r\n"
      "Keep-Alive: timeout=5\r\n"
      "Proxy-Connection: keep-alive\r\n"
      "TE: trailers\r\n"
      "Trailer: X-Checksum\r\n"
      "Upgrade: websocket\r\n"
      "Proxy-Authorization: Basic Zm9vOmJhcg==\r\n"
      "Accept: */*\r\n"
      "Authorization: Bearer t\r\n"
      "\r\n",
      ctx_untrusted());
  auto h = split_head(out);
  CHECK(h.l == lines{"GET /p?q=1 HTTP/1.1",
                     "Host: example.com",
                     "Accept: */*",
                     "Authorization: Bearer t",
                     "X-Forwarded-For: 10.0.0.9",
                     "X-Forwarded-Proto: http",
                     "X-Forwarded-Host: example.com",
                     "X-Request-Id: gen-id"});
  CHECK(h.body.empty());

  SECTION("Transfer-Encoding and Content-Length from the client are not copied") {
    auto c = ctx_untrusted();
    c.framing.type = body_framing::kind::chunked;
    auto h2 = split_head(upstream("POST /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n", c));
    CHECK(h2.l == lines{"POST /u HTTP/1.1", "Host: a", "X-A: 1", "X-Forwarded-For: 10.0.0.9",
                        "X-Forwarded-Proto: http", "X-Forwarded-Host: a", "X-Request-Id: gen-id",
                        "Transfer-Encoding: chunked"});
  }
}

TEST_CASE("build_upstream_request: headers named in Connection removed", "[forwarder]") {
  auto c = ctx_untrusted();
  c.request_id = {};
  auto h = split_head(upstream(
      "GET / HTTP/1.1\r\n"
      "X-Secret: s\r\n"
      "Host: example.com\r\n"
      "Connection: close, X-Secret\r\n"
      "connection: x-other ,  , X-Third\r\n"
      "x-other: o\r\n"
      "X-THIRD: t\r\n"
      "X-Kept: k\r\n"
      "\r\n",
      c));
  CHECK(h.l == lines{"GET / HTTP/1.1", "Host: example.com", "X-Kept: k", "X-Forwarded-For: 10.0.0.9",
                     "X-Forwarded-Proto: http", "X-Forwarded-Host: example.com"});

  SECTION("Host is kept even when named in Connection") {
    auto h2 = split_head(upstream("GET / HTTP/1.1\r\nHost: example.com\r\nConnection: Host\r\n\r\n", c));
    CHECK(named(h2, "Host") == lines{"Host: example.com"});
  }
  SECTION("forwarding headers named in Connection are dropped, then set by the proxy") {
    auto t = c;
    t.peer_trusted = true;
    auto h2 = split_head(upstream(
        "GET / HTTP/1.1\r\nHost: a\r\nConnection: X-Forwarded-For, X-Forwarded-Proto\r\n"
        "X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\n\r\n",
        t));
    CHECK(named(h2, "X-Forwarded-For") == lines{"X-Forwarded-For: 10.0.0.9"});
    CHECK(named(h2, "X-Forwarded-Proto") == lines{"X-Forwarded-Proto: http"});
  }
}

TEST_CASE("build_upstream_request: X-Forwarded-For is what the gateway says, never the client's own", "[forwarder]") {
  auto c = ctx_untrusted();
  SECTION("no incoming value") {
    auto h = split_head(upstream("GET / HTTP/1.1\r\nHost: a\r\n\r\n", c));
    CHECK(named(h, "X-Forwarded-For") == lines{"X-Forwarded-For: 10.0.0.9"});
  }
  SECTION("an incoming value is replaced by the chain the gateway built (the peer alone by default)") {
    auto h = split_head(upstream("GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.1.1.1\r\n\r\n", c));
    CHECK(named(h, "X-Forwarded-For") == lines{"X-Forwarded-For: 10.0.0.9"});
    c.xff = "1.1.1.1, 10.0.0.9";
    auto h2 = split_head(upstream(
        "GET / HTTP/1.1\r\nX-Forwarded-For: 6.6.6.6\r\nHost: a\r\nx-forwarded-for:  2.2.2.2 \r\n\r\n", c));
    CHECK(named(h2, "X-Forwarded-For") == lines{"X-Forwarded-For: 1.1.1.1, 10.0.0.9"});
    CHECK(h2.l[1] == "Host: a");
  }
  SECTION("Forwarded is replaced too, or dropped") {
    auto h = split_head(upstream("GET / HTTP/1.1\r\nHost: a\r\nForwarded: for=6.6.6.6\r\n\r\n", c));
    CHECK(named(h, "Forwarded").empty());
    c.forwarded = "for=1.1.1.1;proto=https";
    auto h2 = split_head(upstream("GET / HTTP/1.1\r\nHost: a\r\nForwarded: for=6.6.6.6\r\n\r\n", c));
    CHECK(named(h2, "Forwarded") == lines{"Forwarded: for=1.1.1.1;proto=https"});
  }
  SECTION("the client header is set to the resolved client; the dropped identity headers go, '_' read as '-'") {
    std::vector<std::string> drop{"X-Real-IP", "Proxy-Client-IP", "HTTP_CLIENT_IP"};
    c.drop = drop;
    c.client_header = "X-Real-IP";
    c.client_ip = "1.1.1.1";
    auto h = split_head(upstream(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Real-IP: 6.6.6.6\r\nX_Real_IP: 6.6.6.7\r\nProxy-Client-IP: 6.6.6.8\r\n"
        "HTTP-CLIENT-IP: 6.6.6.9\r\nhttp_client_ip: 6.6.6.10\r\nX-Kept: k\r\n\r\n",
        c));
    CHECK(named(h, "X-Real-IP") == lines{"X-Real-IP: 1.1.1.1"});
    for (auto name : {"X_Real_IP", "Proxy-Client-IP", "HTTP-CLIENT-IP", "http_client_ip"}) CHECK(named(h, name).empty());
    CHECK(named(h, "X-Kept") == lines{"X-Kept: k"});
  }
  SECTION("HTTP2-Settings is never forwarded") {
    auto h = split_head(upstream("GET / HTTP/1.1\r\nHost: a\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n", c));
    CHECK(named(h, "HTTP2-Settings").empty());
  }
}

TEST_CASE("build_upstream_request: a request without Host gets the upstream's, and no X-Forwarded-Host", "[forwarder]") {
  auto c = ctx_untrusted();
  c.default_host = "127.0.0.1:9000";
  auto h = split_head(upstream("GET / HTTP/1.0\r\n\r\n", c));
  CHECK(named(h, "Host") == lines{"Host: 127.0.0.1:9000"});
  CHECK(named(h, "X-Forwarded-Host").empty());
  auto h2 = split_head(upstream("GET / HTTP/1.0\r\nHost: b\r\n\r\n", c));
  CHECK(named(h2, "Host") == lines{"Host: b"});
}

TEST_CASE("build_upstream_request: the trace context, replaced or passed on", "[forwarder]") {
  const std::string raw =
      "GET / HTTP/1.1\r\nHost: a\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n"
      "TraceState: k=v\r\ntracestate: x=y\r\n\r\n";
  auto c = ctx_untrusted();
  // tracing off: both as they came
  auto off = split_head(upstream(raw, c));
  CHECK(named(off, "traceparent") == lines{"traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"});
  CHECK(named(off, "tracestate") == lines{"TraceState: k=v", "tracestate: x=y"});
  // a new trace: the gateway's traceparent only, no tracestate
  const std::string ours = "00-11111111111111111111111111111111-2222222222222222-00";
  c.traceparent = ours;
  auto fresh = split_head(upstream(raw, c));
  CHECK(named(fresh, "traceparent") == lines{"traceparent: " + ours});
  CHECK(named(fresh, "tracestate").empty());
  // the request's trace continued: its tracestate fields kept, in order
  c.trace_continued = true;
  auto kept = split_head(upstream(raw, c));
  CHECK(named(kept, "traceparent") == lines{"traceparent: " + ours});
  CHECK(named(kept, "tracestate") == lines{"TraceState: k=v", "tracestate: x=y"});
}

TEST_CASE("valid_host", "[forwarder]") {
  using fg::http::valid_host;
  for (auto ok : {"a", "example.com", "api.example.com:8080", "127.0.0.1", "10.0.0.1:65535", "[::1]", "[2001:db8::1]:443",
                  "my_service", "a-b.c~d"})
    CHECK(valid_host(ok));
  for (auto bad : {"", "a b", "a/b", "user@host", "a:b", "a:", ":80", "a:65536", "a:123456", "[::1", "[::1]x",
                   "[::1]:", "[zz]", "a%20b", "a\tb", "a,b", "a:80:90", "[]"}) {
    INFO(bad);
    CHECK_FALSE(valid_host(bad));
  }
}

TEST_CASE("build_upstream_request: X-Forwarded-Proto and X-Forwarded-Host", "[forwarder]") {
  const std::string_view raw =
      "GET / HTTP/1.1\r\n"
      "Host: internal:8080\r\n"
      "X-Forwarded-Proto: https\r\n"
      "X-Forwarded-Host: public.example\r\n"
      "X-Forwarded-Proto: ftp\r\n"
      "X-Forwarded-Host: second.example\r\n"
      "\r\n";
  auto c = ctx_untrusted();
  c.request_id = {};
  SECTION("kept from a trusted peer (the last of each: what a proxy that appends wrote)") {
    c.peer_trusted = true;
    auto h = split_head(upstream(raw, c));
    CHECK(h.l == lines{"GET / HTTP/1.1", "Host: internal:8080", "X-Forwarded-For: 10.0.0.9",
                       "X-Forwarded-Proto: ftp", "X-Forwarded-Host: second.example"});
  }
  SECTION("replaced for an untrusted peer") {
    auto h = split_head(upstream(raw, c));
    CHECK(h.l == lines{"GET / HTTP/1.1", "Host: internal:8080", "X-Forwarded-For: 10.0.0.9",
                       "X-Forwarded-Proto: http", "X-Forwarded-Host: internal:8080"});
  }
  SECTION("trusted peer without them: set by the proxy") {
    c.peer_trusted = true;
    auto h = split_head(upstream("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", c));
    CHECK(named(h, "X-Forwarded-Proto") == lines{"X-Forwarded-Proto: http"});
    CHECK(named(h, "X-Forwarded-Host") == lines{"X-Forwarded-Host: a.example"});
  }
  SECTION("no Host (HTTP/1.0): no X-Forwarded-Host") {
    auto h = split_head(upstream("GET / HTTP/1.0\r\nX-Forwarded-Host: evil\r\n\r\n", c));
    CHECK(h.l == lines{"GET / HTTP/1.1", "X-Forwarded-For: 10.0.0.9", "X-Forwarded-Proto: http"});
  }
}

TEST_CASE("build_upstream_request: X-Request-Id", "[forwarder]") {
  auto c = ctx_untrusted();
  c.request_id = "0123456789abcdef0123456789abcdef";
  const std::string generated = "X-Request-Id: 0123456789abcdef0123456789abcdef";

  SECTION("valid incoming id kept (restated once, after the forwarding headers)") {
    auto h = split_head(upstream("GET / HTTP/1.1\r\nX-Request-Id: abc-123\r\nHost: a\r\n\r\n", c));
    CHECK(named(h, "X-Request-Id") == lines{"X-Request-Id: abc-123"});
  }
  SECTION("128 characters is still valid") {
    std::string id(128, 'a');
    auto h = split_head(upstream("GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: " + id + "\r\n\r\n", c));
    CHECK(named(h, "X-Request-Id") == lines{"X-Request-Id: " + id});
  }
  SECTION("absent: ctx.request_id") {
    auto h = split_head(upstream("GET / HTTP/1.1\r\nHost: a\r\n\r\n", c));
    CHECK(named(h, "X-Request-Id") == lines{generated});
  }
  SECTION("too long: replaced") {
    std::string id(129, 'a');
    auto h = split_head(upstream("GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: " + id + "\r\n\r\n", c));
    CHECK(named(h, "X-Request-Id") == lines{generated});
  }
  SECTION("control characters, spaces or non-ASCII: replaced") {
    for (std::string_view bad : {"a\tb", "a b", "a\x80z", "\xff"}) {
      INFO("id: " << bad);
      auto h = split_head(
          upstream("GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: " + std::string(bad) + "\r\n\r\n", c));
      CHECK(named(h, "X-Request-Id") == lines{generated});
    }
    // Built directly: bytes the parser would not let through.
    for (std::string_view bad : {std::string_view("a\x01z"), std::string_view("a\x7fz"), std::string_view("a\0z", 3)}) {
      bhttp::request_header<> rq;
      rq.method(bhttp::verb::get);
      rq.target("/");
      rq.version(11);
      rq.insert(bhttp::field::host, "a");
      rq.insert("X-Request-Id", bad);
      std::string out;
      build_upstream_request(rq, c, out);
      CHECK(named(split_head(out), "X-Request-Id") == lines{generated});
    }
  }
  SECTION("empty: replaced") {
    auto h = split_head(upstream("GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id:\r\n\r\n", c));
    CHECK(named(h, "X-Request-Id") == lines{generated});
  }
  SECTION("surrounding whitespace trimmed") {
    auto h = split_head(upstream("GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: \t id-1 \t\r\n\r\n", c));
    CHECK(named(h, "X-Request-Id") == lines{"X-Request-Id: id-1"});
  }
  SECTION("repeated: only the first, once") {
    auto h = split_head(upstream("GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: one\r\nX-Request-Id: two\r\n\r\n", c));
    CHECK(named(h, "X-Request-Id") == lines{"X-Request-Id: one"});
  }
  SECTION("invalid and no ctx id: none at all") {
    c.request_id = {};
    auto h = split_head(upstream("GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: a b\r\n\r\n", c));
    CHECK(named(h, "X-Request-Id").empty());
  }
}

TEST_CASE("build_upstream_request: Expect removed", "[forwarder]") {
  auto c = ctx_untrusted();
  c.framing = {body_framing::kind::length, 3};
  auto h = split_head(upstream("PUT /x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n", c));
  CHECK(named(h, "Expect").empty());
  CHECK(h.l == lines{"PUT /x HTTP/1.1", "Host: a", "X-Forwarded-For: 10.0.0.9", "X-Forwarded-Proto: http",
                     "X-Forwarded-Host: a", "X-Request-Id: gen-id", "Content-Length: 3"});
}

TEST_CASE("build_upstream_request: framing restated", "[forwarder]") {
  auto c = ctx_untrusted();
  SECTION("Content-Length from the checked framing") {
    c.framing = {body_framing::kind::length, 12345};
    auto h = split_head(upstream("POST / HTTP/1.1\r\nContent-Length: 12345\r\nHost: a\r\n\r\n", c));
    CHECK(named(h, "Content-Length") == lines{"Content-Length: 12345"});
    CHECK(h.l.back() == "Content-Length: 12345");
    CHECK(named(h, "Transfer-Encoding").empty());
  }
  SECTION("the client's Content-Length text is never copied") {
    c.framing = {body_framing::kind::length, 5};
    bhttp::request_header<> rq;
    rq.method(bhttp::verb::post);
    rq.target("/");
    rq.version(11);
    rq.insert(bhttp::field::host, "a");
    rq.insert(bhttp::field::content_length, "0005");
    rq.insert(bhttp::field::content_length, "5");
    std::string out;
    build_upstream_request(rq, c, out);
    CHECK(named(split_head(out), "Content-Length") == lines{"Content-Length: 5"});
  }
  SECTION("chunked") {
    c.framing.type = body_framing::kind::chunked;
    auto h = split_head(upstream("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n", c));
    CHECK(named(h, "Transfer-Encoding") == lines{"Transfer-Encoding: chunked"});
    CHECK(named(h, "Content-Length").empty());
    CHECK(h.l.back() == "Transfer-Encoding: chunked");
  }
  SECTION("body-less POST, PUT and PATCH state Content-Length: 0") {
    for (std::string_view m : {"POST", "PUT", "PATCH"}) {
      INFO(m);
      auto h = split_head(upstream(std::string(m) + " / HTTP/1.1\r\nHost: a\r\n\r\n", c));
      CHECK(named(h, "Content-Length") == lines{"Content-Length: 0"});
      CHECK(h.l.back() == "Content-Length: 0");
    }
    auto h = split_head(upstream("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", c));
    CHECK(named(h, "Content-Length") == lines{"Content-Length: 0"});
  }
  SECTION("body-less GET, HEAD, DELETE, OPTIONS state nothing") {
    for (std::string_view m : {"GET", "HEAD", "DELETE", "OPTIONS"}) {
      INFO(m);
      auto h = split_head(upstream(std::string(m) + " / HTTP/1.1\r\nHost: a\r\n\r\n", c));
      CHECK(named(h, "Content-Length").empty());
      CHECK(named(h, "Transfer-Encoding").empty());
    }
  }
}

TEST_CASE("build_upstream_request: upgrade", "[forwarder]") {
  const std::string_view raw =
      "GET /ws HTTP/1.1\r\n"
      "Host: a\r\n"
      "Connection: keep-alive, Upgrade\r\n"
      "Upgrade: websocket\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
      "Sec-WebSocket-Version: 13\r\n"
      "\r\n";
  auto c = ctx_untrusted();
  c.request_id = {};
  SECTION("forwarded when ctx.upgrade") {
    c.upgrade = true;
    auto h = split_head(upstream(raw, c));
    CHECK(h.l == lines{"GET /ws HTTP/1.1", "Host: a", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                       "Sec-WebSocket-Version: 13", "X-Forwarded-For: 10.0.0.9", "X-Forwarded-Proto: http",
                       "X-Forwarded-Host: a", "Connection: Upgrade", "Upgrade: websocket"});
  }
  SECTION("dropped otherwise (no h2c smuggling)") {
    auto h = split_head(upstream(raw, c));
    CHECK(named(h, "Connection").empty());
    CHECK(named(h, "Upgrade").empty());
    auto h2 = split_head(upstream(
        "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
        "HTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
        c));
    CHECK(h2.l == lines{"GET / HTTP/1.1", "Host: a", "X-Forwarded-For: 10.0.0.9", "X-Forwarded-Proto: http",
                        "X-Forwarded-Host: a"});
  }
}

TEST_CASE("build_upstream_request: request line and output buffer", "[forwarder]") {
  auto c = ctx_untrusted();
  for (std::string_view v : {"HTTP/1.0", "HTTP/1.1"}) {
    INFO(v);
    auto h = split_head(upstream("GET /x/y?z=1&w " + std::string(v) + "\r\nHost: a\r\n\r\n", c));
    CHECK(h.l[0] == "GET /x/y?z=1&w HTTP/1.1");
  }
  auto h = split_head(upstream("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", c));
  CHECK(h.l[0] == "OPTIONS * HTTP/1.1");
  h = split_head(upstream("GET http://a/x?q HTTP/1.1\r\nHost: a\r\n\r\n", c));
  CHECK(h.l[0] == "GET http://a/x?q HTTP/1.1");
  h = split_head(upstream("BREW /pot HTTP/1.1\r\nHost: a\r\n\r\n", c));
  CHECK(h.l[0] == "BREW /pot HTTP/1.1");

  // Appends to `out`.
  std::string out = "prefix";
  build_upstream_request(parse_request("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), c, out);
  CHECK(out.rfind("prefixGET / HTTP/1.1\r\n", 0) == 0);
  CHECK(out.size() > 6);
  CHECK(out.substr(out.size() - 4) == "\r\n\r\n");
}

// ---------------------------------------------------------------- build_downstream_response

TEST_CASE("build_downstream_response: hop-by-hop headers removed", "[forwarder]") {
  response_context c;
  c.framing = response_framing::length;
  c.length = 5;
  auto h = split_head(downstream(
      "HTTP/1.1 200 OK\r\n"
      "Content-Type: text/plain\r\n"
      "Content-Length: 5\r\n"
      "Connection: keep-alive, X-Internal\r\n"
      "Keep-Alive: timeout=5\r\n"
      "X-Internal: secret\r\n"
      "Trailer: X-Sum\r\n"
      "Upgrade: h2c\r\n"
      "Proxy-Authenticate: Basic\r\n"
      "Proxy-Connection: keep-alive\r\n"
      "TE: trailers\r\n"
      "Set-Cookie: a=1\r\n"
      "Set-Cookie: b=2\r\n"
      "\r\n",
      c));
  CHECK(h.l == lines{"HTTP/1.1 200 OK", "Content-Type: text/plain", "Set-Cookie: a=1", "Set-Cookie: b=2",
                     "Content-Length: 5"});
  CHECK(h.body.empty());
}

TEST_CASE("build_downstream_response: fields in the upstream's order, those of one name included", "[forwarder]") {
  response_context c;
  c.framing = response_framing::length;
  auto h = split_head(downstream(
      "HTTP/1.1 200 OK\r\n"
      "Set-Cookie: a=1\r\n"
      "X-B: 2\r\n"
      "set-cookie: c=3\r\n"
      "X-Folded: one\r\n two\r\n"
      "Content-Length: 0\r\n"
      "\r\n",
      c));
  CHECK(h.l == lines{"HTTP/1.1 200 OK", "Set-Cookie: a=1", "X-B: 2", "set-cookie: c=3", "X-Folded: one two",
                     "Content-Length: 0"});
}

TEST_CASE("response_head: past its inline storage, every field kept and found by name", "[forwarder]") {
  std::string raw = "HTTP/1.1 200 OK\r\n";
  for (int i = 0; i < 40; ++i) raw += "X-F" + std::to_string(i) + ": " + std::string(static_cast<std::size_t>(i) * 7, 'v') + "\r\n";
  raw += "Content-Length: 0\r\n\r\n";
  auto h = parse_response(raw);
  REQUIRE(h.size() == 41);
  CHECK(h["x-f39"] == std::string(39 * 7, 'v'));
  CHECK(h["X-F0"].empty());
  CHECK(h[bhttp::field::content_length] == "0");
  CHECK(h["X-None"].empty());
  int i = 0;
  for (const auto& f : h) {
    if (i < 40) CHECK(f.name_string() == "X-F" + std::to_string(i));
    ++i;
  }
  response_context c;
  c.framing = response_framing::length;
  CHECK(split_head(downstream(raw, c)).l.size() == 42);
}

TEST_CASE("build_downstream_response: Connection handling", "[forwarder]") {
  const std::string_view raw = "HTTP/1.1 204 No Content\r\nConnection: keep-alive\r\nX-A: 1\r\n\r\n";
  response_context c;
  SECTION("keep-alive, HTTP/1.1 client: nothing said") {
    auto h = split_head(downstream(raw, c));
    CHECK(h.l == lines{"HTTP/1.1 204 No Content", "X-A: 1"});
  }
  SECTION("not keep-alive: Connection: close") {
    c.keep_alive = false;
    auto h = split_head(downstream(raw, c));
    CHECK(h.l == lines{"HTTP/1.1 204 No Content", "X-A: 1", "Connection: close"});
  }
  SECTION("keep-alive, HTTP/1.0 client: Connection: keep-alive") {
    c.client_version = 10;
    auto h = split_head(downstream(raw, c));
    CHECK(h.l == lines{"HTTP/1.0 204 No Content", "X-A: 1", "Connection: keep-alive"});
  }
  SECTION("not keep-alive, HTTP/1.0 client: Connection: close") {
    c.client_version = 10;
    c.keep_alive = false;
    auto h = split_head(downstream(raw, c));
    CHECK(h.l == lines{"HTTP/1.0 204 No Content", "X-A: 1", "Connection: close"});
  }
  SECTION("upstream asking to close does not leak through") {
    auto h = split_head(downstream("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", c));
    CHECK(named(h, "Connection").empty());
  }
}

TEST_CASE("build_downstream_response: framing restated", "[forwarder]") {
  response_context c;
  SECTION("length") {
    c.framing = response_framing::length;
    c.length = 42;
    auto h = split_head(downstream("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n", c));
    CHECK(h.l == lines{"HTTP/1.1 200 OK", "X-A: 1", "Content-Length: 42"});
  }
  SECTION("chunked") {
    c.framing = response_framing::chunked;
    auto h = split_head(downstream("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n", c));
    CHECK(h.l == lines{"HTTP/1.1 200 OK", "X-A: 1", "Transfer-Encoding: chunked"});
  }
  SECTION("chunked from an upstream length") {
    c.framing = response_framing::chunked;
    auto h = split_head(downstream("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", c));
    CHECK(h.l == lines{"HTTP/1.1 200 OK", "Transfer-Encoding: chunked"});
  }
  SECTION("close-delimited and none state no length") {
    for (auto f : {response_framing::close_delimited, response_framing::none}) {
      c.framing = f;
      c.keep_alive = f != response_framing::close_delimited;
      auto h = split_head(downstream("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\nETag: \"x\"\r\n\r\n", c));
      CHECK(named(h, "Content-Length").empty());
      CHECK(named(h, "Transfer-Encoding").empty());
      CHECK(named(h, "ETag") == lines{"ETag: \"x\""});
    }
  }
}

TEST_CASE("build_downstream_response: a transfer coding other than one chunked is reported", "[forwarder]") {
  response_context c;
  c.framing = response_framing::chunked;
  auto ok = [&](std::string_view raw) {
    std::string out;
    return build_downstream_response(parse_response(raw), c, out);
  };
  CHECK(ok("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"));
  CHECK(ok("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"));
  CHECK(ok("HTTP/1.1 200 OK\r\nTransfer-Encoding: CHUNKED\r\n\r\n"));
  CHECK_FALSE(ok("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"));
  CHECK_FALSE(ok("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"));
  CHECK_FALSE(ok("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"));
  // Beast takes this one (its Content-Length frames it): ambiguous, reported all the same.
  CHECK_FALSE(ok("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\n"));
}

TEST_CASE("build_downstream_response: extra lines appended", "[forwarder]") {
  response_context c;
  c.framing = response_framing::length;
  c.length = 2;
  c.keep_alive = false;
  c.extra = "RateLimit-Policy: \"default\";q=100;w=60\r\nRateLimit: \"default\";r=99;t=60\r\n";
  auto out = downstream("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", c);
  auto h = split_head(out);
  CHECK(h.l == lines{"HTTP/1.1 200 OK", "Content-Length: 2", "Connection: close",
                     "RateLimit-Policy: \"default\";q=100;w=60", "RateLimit: \"default\";r=99;t=60"});
  CHECK(h.body.empty());

  // Appends to `out`.
  std::string buf = "x";
  build_downstream_response(parse_response("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), response_context{}, buf);
  CHECK(buf == "xHTTP/1.1 200 OK\r\n\r\n");
}

TEST_CASE("build_downstream_response: 101 upgrade", "[forwarder]") {
  response_context c;
  c.upgrade = true;
  c.keep_alive = false;  // ignored: the connection becomes a tunnel
  auto h = split_head(downstream(
      "HTTP/1.1 101 Switching Protocols\r\n"
      "Upgrade: websocket\r\n"
      "Connection: Upgrade\r\n"
      "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
      "\r\n",
      c));
  CHECK(h.l == lines{"HTTP/1.1 101 Switching Protocols", "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
                     "Connection: Upgrade", "Upgrade: websocket"});
}

TEST_CASE("build_downstream_response: status line and reason phrase", "[forwarder]") {
  response_context c;
  auto h = split_head(downstream("HTTP/1.1 200 Everything Is Fine\r\nContent-Length: 0\r\n\r\n", c));
  CHECK(h.l[0] == "HTTP/1.1 200 Everything Is Fine");
  h = split_head(downstream("HTTP/1.1 418 I'm a teapot\r\nContent-Length: 0\r\n\r\n", c));
  CHECK(h.l[0] == "HTTP/1.1 418 I'm a teapot");
  // An empty reason gets the standard one.
  h = split_head(downstream("HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n", c));
  CHECK(h.l[0] == "HTTP/1.1 404 Not Found");
  h = split_head(downstream("HTTP/1.0 503 Busy\r\nContent-Length: 0\r\n\r\n", c));
  CHECK(h.l[0] == "HTTP/1.1 503 Busy");  // the version is the client's, not upstream's
  c.client_version = 10;
  h = split_head(downstream("HTTP/1.1 429 Slow Down\r\nContent-Length: 0\r\n\r\n", c));
  CHECK(h.l[0] == "HTTP/1.0 429 Slow Down");
}

// ---------------------------------------------------------------- helpers

TEST_CASE("is_upgrade_request", "[forwarder]") {
  using fg::http::is_upgrade_request;
  CHECK(is_upgrade_request(parse_request("GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")));
  CHECK(is_upgrade_request(
      parse_request("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, UPGRADE\r\nUpgrade: websocket\r\n\r\n")));
  CHECK(is_upgrade_request(parse_request(
      "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nconnection: upgrade\r\nUpgrade: WebSocket\r\n\r\n")));
  // Only WebSocket is tunnelled: h2c and the rest are dropped, not forwarded.
  CHECK_FALSE(is_upgrade_request(
      parse_request("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nconnection: upgrade\r\nUpgrade: x\r\n\r\n")));
  CHECK_FALSE(is_upgrade_request(parse_request(
      "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAA\r\n\r\n")));
  CHECK_FALSE(is_upgrade_request(parse_request("POST / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")));
  CHECK_FALSE(is_upgrade_request(parse_request("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n")));
  CHECK_FALSE(is_upgrade_request(parse_request("GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n")));
  CHECK_FALSE(is_upgrade_request(
      parse_request("GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nUpgrade: websocket\r\n\r\n")));
  CHECK_FALSE(is_upgrade_request(
      parse_request("GET / HTTP/1.1\r\nHost: a\r\nConnection: upgraded\r\nUpgrade: websocket\r\n\r\n")));
  CHECK_FALSE(is_upgrade_request(parse_request("GET / HTTP/1.1\r\nHost: a\r\n\r\n")));
}

TEST_CASE("incoming_request_id", "[forwarder]") {
  using fg::http::incoming_request_id;
  auto id_of = [](std::string_view value) {
    bhttp::request_header<> h;
    h.insert("x-request-id", value);
    return std::string(incoming_request_id(h));
  };
  CHECK(id_of("abc") == "abc");
  CHECK(id_of("  abc\t") == "abc");
  CHECK(id_of("a-b_c.d:e/f=") == "a-b_c.d:e/f=");
  CHECK(id_of(std::string(128, 'x')) == std::string(128, 'x'));
  CHECK(id_of(std::string(129, 'x')).empty());
  CHECK(id_of("").empty());
  CHECK(id_of("   ").empty());
  CHECK(id_of("a b").empty());
  CHECK(id_of("a\x01" "b").empty());
  CHECK(id_of("a\x7f" "b").empty());
  CHECK(id_of("caf\xc3\xa9").empty());
  CHECK(id_of("a\r\nX-Injected: 1").empty());
  CHECK(incoming_request_id(bhttp::request_header<>{}).empty());
  // Looked up by name, case-insensitively.
  auto h = parse_request("GET / HTTP/1.1\r\nHost: a\r\nX-REQUEST-ID: Up\r\n\r\n");
  CHECK(incoming_request_id(h) == "Up");
}

TEST_CASE("make_request_id", "[forwarder]") {
  using fg::http::make_request_id;
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    auto id = make_request_id();
    REQUIRE(id.size() == 32);
    CHECK(std::all_of(id.begin(), id.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }));
    seen.insert(id);
  }
  CHECK(seen.size() == 100);
  CHECK(make_request_id() != make_request_id());
}

// ---------------------------------------------------------------- responses::render

TEST_CASE("responses::render", "[forwarder]") {
  using fg::http::local_response;
  using fg::http::render;

  SECTION("status line, Content-Length matches the body, Connection: close") {
    local_response r;
    r.status = 429;
    r.body = "{\"error\":\"too many requests\"}";
    auto out = render(r);
    auto h = split_head(out);
    CHECK(h.l == lines{"HTTP/1.1 429 Too Many Requests", "Content-Type: application/json", "Content-Length: 29",
                       "Connection: close"});
    CHECK(h.body == r.body);
    CHECK(h.body.size() == 29);
  }
  SECTION("keep-alive: no Connection header") {
    local_response r;
    r.status = 404;
    r.body = "nope\n";
    r.content_type = "text/plain";
    r.keep_alive = true;
    auto h = split_head(render(r));
    CHECK(h.l == lines{"HTTP/1.1 404 Not Found", "Content-Type: text/plain", "Content-Length: 5"});
    CHECK(h.body == "nope\n");
  }
  SECTION("default body from the reason") {
    local_response r;
    r.status = 502;
    auto h = split_head(render(r));
    CHECK(h.body == "{\"error\":\"bad gateway\"}\n");
    CHECK(named(h, "Content-Length") == lines{"Content-Length: " + std::to_string(h.body.size())});
    CHECK(h.l[0] == "HTTP/1.1 502 Bad Gateway");
  }
  SECTION("HEAD: the length of the body, but no body bytes") {
    local_response r;
    r.status = 429;
    r.body = "0123456789";
    r.head = true;
    r.keep_alive = true;
    auto out = render(r);
    auto h = split_head(out);
    CHECK(h.body.empty());
    CHECK(named(h, "Content-Length") == lines{"Content-Length: 10"});
    CHECK(out.substr(out.size() - 4) == "\r\n\r\n");
  }
  SECTION("request id and extra lines") {
    local_response r;
    r.status = 429;
    r.body = "x";
    r.request_id = "rid-1";
    r.extra = "Retry-After: 3\r\nRateLimit: \"d\";r=0;t=3\r\n";
    auto h = split_head(render(r));
    CHECK(h.l == lines{"HTTP/1.1 429 Too Many Requests", "Content-Type: application/json", "Content-Length: 1",
                       "X-Request-Id: rid-1", "Retry-After: 3", "RateLimit: \"d\";r=0;t=3", "Connection: close"});
    CHECK(h.body == "x");
  }
  SECTION("the rendered response parses back with Beast") {
    local_response r;
    r.status = 408;
    r.keep_alive = false;
    auto out = render(r);
    bhttp::response_parser<bhttp::string_body> p;
    p.eager(true);
    boost::system::error_code ec;
    p.put(boost::asio::buffer(out), ec);
    REQUIRE_FALSE(ec);
    REQUIRE(p.is_done());
    CHECK(p.get().result_int() == 408);
    CHECK(p.get().body() == "{\"error\":\"request timeout\"}\n");
    CHECK_FALSE(p.get().keep_alive());
  }
  SECTION("reason") {
    CHECK(fg::http::reason(200) == "OK");
    CHECK(fg::http::reason(429) == "Too Many Requests");
    CHECK(fg::http::reason(431) == "Request Header Fields Too Large");
  }
}
