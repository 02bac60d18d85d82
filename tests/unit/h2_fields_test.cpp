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
