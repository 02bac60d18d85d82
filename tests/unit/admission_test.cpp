// http::admit, the pure judgement of a parsed request head: each refusal and its status,
// the route chosen (host, method, path, prefix, absolute form), the request id, what the
// session goes on with (body framing, Expect, Upgrade), and the client's identity from
// a trusted and an untrusted peer.
#include <catch2/catch.hpp>

#include <boost/asio/ip/address.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <string>
#include <vector>

#include "admin_fakes.hpp"
#include "http/admission.hpp"

namespace {

namespace bhttp = boost::beast::http;

const std::string kConfig = R"(upstreams:
  api:
    address: "127.0.0.1:9000"
client_ip:
  trusted_proxies: ["10.0.0.0/8"]
http:
  max_body_bytes: 100
routes:
  - name: exact
    match: {path: /exact, methods: [GET]}
    upstream: api
  - name: hosted
    match: {host: api.example, path_prefix: /}
    upstream: api
  - name: api
    match: {path_prefix: /api/}
    upstream: api
)";

// The head parsed as the session parses it (Beast, head only), then admitted. (What
// Beast itself refuses, such as Content-Length with Transfer-Encoding, never gets here:
// the session answers it 400 from its parse_head.)
struct judged {
  bhttp::request_parser<bhttp::empty_body> parser;
  fg::http::admission ad;
};

void admit_head(const fg::http::compiled_config& rt, std::string head, judged& j, const char* peer = "192.0.2.1") {
  j.parser.eager(false);
  boost::system::error_code ec;
  j.parser.put(boost::asio::buffer(head), ec);
  REQUIRE_FALSE(ec);
  REQUIRE(j.parser.is_header_done());
  const auto ip = boost::asio::ip::make_address(peer);
  const std::string text = ip.to_string(), key = rt.client_ip.key_of(ip);
  fg::http::admit(rt, j.parser.get().base(), j.parser.keep_alive(), {ip, text, key}, j.ad);
}

std::string route_name(const fg::http::compiled_config& rt, const fg::http::admission& ad) {
  return ad.route < 0 ? "-" : rt.cfg->routes[static_cast<std::size_t>(ad.route)].name;
}

}  // namespace

TEST_CASE("admission: each head gets its status and route", "[admission]") {
  auto rt = fg::http::compiled_config::build(fg::test::load(kConfig));
  struct row {
    const char* why;
    std::string head;
    unsigned status;
    const char* route;
  };
  const std::vector<row> rows = {
      {"an exact path and method", "GET /exact HTTP/1.1\r\nHost: a\r\n\r\n", 0, "exact"},
      {"the exact path, another method", "POST /exact HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", 404, "-"},
      {"a prefix", "GET /api/v1 HTTP/1.1\r\nHost: a\r\n\r\n", 0, "api"},
      {"a host", "GET /anything HTTP/1.1\r\nHost: api.example\r\n\r\n", 0, "hosted"},
      {"a host with a port", "GET /anything HTTP/1.1\r\nHost: api.example:8080\r\n\r\n", 0, "hosted"},
      {"no route", "GET /nothing HTTP/1.1\r\nHost: a\r\n\r\n", 404, "-"},
      {"an absolute-form target routes by its authority",
       "GET http://api.example/x HTTP/1.1\r\nHost: api.example\r\n\r\n", 0, "hosted"},
      {"dot segments are resolved before routing", "GET /x/../api/a HTTP/1.1\r\nHost: a\r\n\r\n", 0, "api"},
      {"an invalid Host", "GET /api/ HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "-"},
      {"two Hosts", "GET /api/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "-"},
      {"HTTP/1.1 without Host", "GET /api/ HTTP/1.1\r\n\r\n", 400, "-"},
      {"a Transfer-Encoding other than chunked", "POST /api/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
       400, "-"},
      {"an interpreted field spelled with '_'", "GET /api/ HTTP/1.1\r\nHost: a\r\nContent_Length: 5\r\n\r\n", 400, "-"},
      {"a field with '_' that nothing reads", "GET /api/ HTTP/1.1\r\nHost: a\r\nX_Custom: 5\r\n\r\n", 0, "api"},
      {"a Content-Length over max_body_bytes", "POST /api/ HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n", 413,
       "-"},
      {"a Content-Length at max_body_bytes", "POST /api/ HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n", 0, "api"},
  };
  for (const auto& r : rows) {
    INFO(r.why);
    judged j;
    admit_head(*rt, r.head, j);
    CHECK(j.ad.status == r.status);
    CHECK(route_name(*rt, j.ad) == r.route);
  }
}

TEST_CASE("admission: what the session goes on with", "[admission]") {
  auto rt = fg::http::compiled_config::build(fg::test::load(kConfig));
  judged chunked;
  admit_head(*rt, "POST /api/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n", chunked);
  CHECK(chunked.ad.status == 0);
  CHECK(chunked.ad.has_body());
  CHECK(chunked.ad.framing.type == fg::http::body_framing::kind::chunked);
  CHECK(chunked.ad.has_expect);
  CHECK(chunked.ad.expect == "100-continue");
  judged get;
  admit_head(*rt, "GET /api/ HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", get);
  CHECK_FALSE(get.ad.has_body());
  CHECK_FALSE(get.ad.has_expect);
  CHECK(get.ad.has_upgrade);
  // A 404 keeps the connection when nothing of the request is left unread.
  judged missing;
  admit_head(*rt, "GET /nothing HTTP/1.1\r\nHost: a\r\n\r\n", missing);
  CHECK(missing.ad.keep_alive);
  judged missing_with_body;
  admit_head(*rt, "POST /nothing HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\n", missing_with_body);
  CHECK_FALSE(missing_with_body.ad.keep_alive);
}

TEST_CASE("admission: a request id is kept when usable, made when absent or unusable", "[admission]") {
  auto rt = fg::http::compiled_config::build(fg::test::load(kConfig));
  judged given, absent, unusable, again;
  admit_head(*rt, "GET /api/ HTTP/1.1\r\nHost: a\r\nX-Request-Id: abc-123\r\n\r\n", given);
  CHECK(given.ad.request_id == "abc-123");
  admit_head(*rt, "GET /api/ HTTP/1.1\r\nHost: a\r\n\r\n", absent);
  admit_head(*rt, "GET /api/ HTTP/1.1\r\nHost: a\r\n\r\n", again);
  CHECK_FALSE(absent.ad.request_id.empty());
  CHECK(absent.ad.request_id != again.ad.request_id);
  admit_head(*rt, "GET /api/ HTTP/1.1\r\nHost: a\r\nX-Request-Id: " + std::string(500, 'x') + "\r\n\r\n", unusable);
  CHECK(unusable.ad.request_id.size() < 500);
}

TEST_CASE("admission: X-Forwarded-For names the client only from a trusted peer", "[admission]") {
  auto rt = fg::http::compiled_config::build(fg::test::load(kConfig));
  const std::string head = "GET /api/ HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n";
  judged untrusted, trusted;
  admit_head(*rt, head, untrusted, "192.0.2.1");
  CHECK_FALSE(untrusted.ad.client.peer_trusted);
  CHECK(untrusted.ad.client.who.key == rt->client_ip.key_of(boost::asio::ip::make_address("192.0.2.1")));
  CHECK_FALSE(untrusted.ad.client.who.from_header);
  admit_head(*rt, head, trusted, "10.1.2.3");
  CHECK(trusted.ad.client.peer_trusted);
  CHECK(trusted.ad.client.who.from_header);
  CHECK(trusted.ad.client.who.key == rt->client_ip.key_of(boost::asio::ip::make_address("203.0.113.9")));
  CHECK(trusted.ad.client.xff.find("203.0.113.9") != std::string::npos);
  CHECK(trusted.ad.client.xff.find("10.1.2.3") != std::string::npos);
  // A refused request resolves no client: nothing of it is used.
  judged refused;
  admit_head(*rt, "GET /nothing HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n", refused, "10.1.2.3");
  CHECK(refused.ad.client.who.key.empty());
}
