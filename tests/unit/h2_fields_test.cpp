// http::h2_head_of / connection_specific / join_cookie: a head the gateway built as
// HTTP/1.1 becomes an HTTP/2 status and lower-case fields, without the fields that only
// mean something to one HTTP/1.1 connection; cookies HTTP/2 splits are joined.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "http/h2_fields.hpp"

namespace {

std::vector<std::pair<std::string, std::string>> fields(const fg::http::h2_head& h) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : h.fields)
    out.emplace_back(std::string(reinterpret_cast<const char*>(f.name), f.namelen),
                     std::string(reinterpret_cast<const char*>(f.value), f.valuelen));
  return out;
}

}  // namespace

TEST_CASE("an HTTP/1.1 head becomes HTTP/2's status and fields", "[h2]") {
  fg::http::h2_head h;
  REQUIRE(fg::http::h2_head_of("HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
                               "Connection: close\r\nTransfer-Encoding: chunked\r\nKeep-Alive: timeout=5\r\n"
                               "RateLimit:  \"l\";r=0;t=5 \r\nX-Request-Id: abc\r\n\r\n",
                               h));
  using v = std::vector<std::pair<std::string, std::string>>;
  CHECK(fields(h) == v{{":status", "429"}, {"content-type", "application/json"}, {"ratelimit", "\"l\";r=0;t=5"},
                       {"x-request-id", "abc"}});
  // (reused: nothing of the last head stays)
  REQUIRE(fg::http::h2_head_of("HTTP/1.0 204 No Content\r\nUpgrade: h2c\r\nTE: trailers\r\nX-A: 1", h));
  CHECK(fields(h) == v{{":status", "204"}, {"x-a", "1"}});
}

TEST_CASE("what is not a response head is refused", "[h2]") {
  fg::http::h2_head h;
  CHECK_FALSE(fg::http::h2_head_of("", h));
  CHECK_FALSE(fg::http::h2_head_of("HTTP/2 200\r\n\r\n", h));
  CHECK_FALSE(fg::http::h2_head_of("HTTP/1.1 2x0 OK\r\n\r\n", h));
  CHECK_FALSE(fg::http::h2_head_of("HTTP/1.1 099 Low\r\n\r\n", h));
  CHECK(fg::http::h2_head_of("HTTP/1.1 200 OK\r\nno colon here\r\n: empty name\r\n\r\n", h));
  CHECK(h.fields.size() == 1);
}

TEST_CASE("connection-specific fields and joined cookies", "[h2]") {
  for (auto name : {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"})
    CHECK(fg::http::connection_specific(name));
  CHECK_FALSE(fg::http::connection_specific("content-length"));
  CHECK_FALSE(fg::http::connection_specific("trailer"));
  std::string joined;
  fg::http::join_cookie(joined, "a=1");
  fg::http::join_cookie(joined, "b=2");
  CHECK(joined == "a=1; b=2");
}

TEST_CASE("a request head for an HTTP/2 upstream: pseudo-fields from the request line and Host", "[h2]") {
  fg::http::h2_head h;
  using v = std::vector<std::pair<std::string, std::string>>;
  REQUIRE(fg::http::h2_request_of("POST /test.Echo/Unary HTTP/1.1\r\nHost: api.internal:50051\r\nContent-Type: "
                                  "application/grpc\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n"
                                  "TE: trailers\r\nX-Forwarded-For: 10.0.0.1\r\nHost: second\r\n\r\n",
                                  "http", true, h));
  CHECK(fields(h) == v{{":method", "POST"}, {":scheme", "http"}, {":authority", "api.internal:50051"},
                       {":path", "/test.Echo/Unary"}, {"content-type", "application/grpc"},
                       {"x-forwarded-for", "10.0.0.1"}, {"te", "trailers"}});
  // no Host: no :authority; TE only when asked for
  REQUIRE(fg::http::h2_request_of("GET /x?y=1 HTTP/1.1\r\nX-A: 1\r\n\r\n", "https", false, h));
  CHECK(fields(h) == v{{":method", "GET"}, {":scheme", "https"}, {":path", "/x?y=1"}, {"x-a", "1"}});
  CHECK_FALSE(fg::http::h2_request_of("GARBAGE\r\n\r\n", "http", false, h));
}

TEST_CASE("an HTTP/2 upstream's head as HTTP/1.1 text: its framing said for the relay", "[h2]") {
  std::string out;
  using f = std::vector<std::pair<std::string, std::string>>;
  const f fields{{"content-type", "application/grpc"}, {"grpc-status", "0"}};
  fg::http::h1_head_of(200, fields, true, out);  // END_STREAM with the head: no body
  CHECK(out == "HTTP/1.1 200 \r\ncontent-type: application/grpc\r\ngrpc-status: 0\r\ncontent-length: 0\r\n\r\n");
  fg::http::h1_head_of(200, fields, false, out);  // a body of no known length
  CHECK(out == "HTTP/1.1 200 \r\ncontent-type: application/grpc\r\ngrpc-status: 0\r\ntransfer-encoding: chunked\r\n\r\n");
  fg::http::h1_head_of(404, f{{"content-length", "5"}, {"connection", "close"}}, false, out);
  CHECK(out == "HTTP/1.1 404 \r\ncontent-length: 5\r\n\r\n");
}
