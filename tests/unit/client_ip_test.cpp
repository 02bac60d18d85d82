// Client identity: trusted proxies, forwarding headers, CIDR parsing.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "net/cidr.hpp"
#include "net/client_ip.hpp"

using fg::net::address;
using fg::net::cidr_set;
using fg::net::client_ip_resolver;
using fg::net::header_field;

namespace {

address ip(const char* s) { return boost::asio::ip::make_address(s); }

cidr_set make_set(const std::vector<std::string>& cidrs) {
  cidr_set set;
  for (const auto& c : cidrs) {
    auto parsed = fg::net::parse_cidr(c);
    INFO("trusted CIDR: " << c);
    REQUIRE(parsed);
    set.add(*parsed);
  }
  return set;
}

// The one resolution, as a session makes it: the peer normalized and keyed first.
fg::net::client_view resolve(const client_ip_resolver& r, const char* peer, const std::vector<header_field>& fields,
                             bool full = false) {
  const auto a = fg::net::normalize(ip(peer));
  const auto text = a.to_string();
  const auto key = r.key_of(a);
  CHECK(r.key_of(a, text) == key);  // (the connection's text, as the exchange keys it)
  const std::span<const header_field> listed(fields);
  fg::net::client_view v;
  r.resolve({a, text, key}, fg::net::listed_fields(listed), full, v);
  return v;
}

const std::vector<std::string> kTrusted = {"10.0.0.0/8", "2001:db8:ffff::/48"};
const std::vector<std::string> kAll = {"X-Forwarded-For",    "Forwarded",      "X-Real-IP",
                                       "Proxy-Client-IP",    "WL-Proxy-Client-IP", "HTTP_CLIENT_IP"};
const std::vector<std::string> kXff = {"X-Forwarded-For"};
const std::vector<std::string> kFwd = {"Forwarded"};
const std::vector<std::string> kReal = {"X-Real-IP"};

struct resolve_case {
  const char* description;
  const char* peer;
  std::vector<std::string> trusted;
  std::vector<std::string> headers;
  std::vector<header_field> fields;
  unsigned ipv6_prefix;
  const char* expected_key;
  bool expected_from_header;
};

std::string describe(const std::vector<header_field>& fields) {
  std::ostringstream os;
  for (const auto& f : fields) os << "\n    " << f.name << ": " << f.value;
  return os.str();
}

// Peers: 10.0.0.1 is a trusted proxy, 203.0.113.7 an ordinary client.
// 198.51.100.9 is the "real client" in the forwarded cases, 6.6.6.6 a forged value.
const std::vector<resolve_case> kCases = {
    // ---- untrusted peers: headers are never consulted (forged) -----------------------
    {"forged: untrusted peer sends X-Forwarded-For", "203.0.113.7", kTrusted, kAll,
     {{"X-Forwarded-For", "6.6.6.6"}}, 128, "203.0.113.7", false},
    {"forged: untrusted peer sends Forwarded", "203.0.113.7", kTrusted, kAll,
     {{"Forwarded", "for=6.6.6.6"}}, 128, "203.0.113.7", false},
    {"forged: untrusted peer sends X-Real-IP", "203.0.113.7", kTrusted, kAll,
     {{"X-Real-IP", "6.6.6.6"}}, 128, "203.0.113.7", false},
    {"forged: untrusted peer sends every configured header", "203.0.113.7", kTrusted, kAll,
     {{"X-Forwarded-For", "6.6.6.6"},
      {"Forwarded", "for=6.6.6.7"},
      {"X-Real-IP", "6.6.6.8"},
      {"Proxy-Client-IP", "6.6.6.9"},
      {"WL-Proxy-Client-IP", "6.6.6.10"},
      {"HTTP_CLIENT_IP", "6.6.6.11"}},
     128, "203.0.113.7", false},
    {"forged: untrusted peer sends Proxy-Client-IP / WL-Proxy-Client-IP / HTTP_CLIENT_IP", "203.0.113.7",
     kTrusted, {"Proxy-Client-IP", "WL-Proxy-Client-IP", "HTTP_CLIENT_IP"},
     {{"Proxy-Client-IP", "6.6.6.6"}, {"WL-Proxy-Client-IP", "6.6.6.6"}, {"HTTP_CLIENT_IP", "6.6.6.6"}}, 128,
     "203.0.113.7", false},
    {"forged: untrusted peer claims to be a trusted proxy's client via XFF", "203.0.113.7", kTrusted, kAll,
     {{"X-Forwarded-For", "6.6.6.6, 10.0.0.2"}}, 128, "203.0.113.7", false},
    {"forged: untrusted IPv6 peer sends XFF", "2001:db8:1::99", kTrusted, kAll,
     {{"X-Forwarded-For", "6.6.6.6"}}, 128, "2001:db8:1::99", false},
    {"forged: untrusted v4-mapped peer sends XFF (peer normalised)", "::ffff:203.0.113.7", kTrusted, kAll,
     {{"X-Forwarded-For", "6.6.6.6"}}, 128, "203.0.113.7", false},
    {"forged: no trusted proxies configured at all", "10.0.0.1", {}, kAll,
     {{"X-Forwarded-For", "6.6.6.6"}, {"X-Real-IP", "6.6.6.6"}}, 128, "10.0.0.1", false},
    {"forged: peer just outside the trusted range", "11.0.0.1", kTrusted, kAll,
     {{"X-Forwarded-For", "6.6.6.6"}}, 128, "11.0.0.1", false},
    {"forged: untrusted IPv6 peer with /64 keying, header ignored", "2001:db8:5:6:7:8:9:a", kTrusted, kAll,
     {{"X-Real-IP", "2001:db8:9:9::1"}}, 64, "2001:db8:5:6::/64", false},
    {"forged: client prepends XFF entries behind a trusted proxy", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "6.6.6.6, 7.7.7.7, 198.51.100.9"}}, 128, "198.51.100.9", true},
    {"forged: client prepends a trusted-looking XFF entry", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "10.9.9.9, 198.51.100.9"}}, 128, "198.51.100.9", true},
    {"forged: client sends its own XFF line, proxy adds another", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "6.6.6.6"}, {"X-Forwarded-For", "198.51.100.9"}}, 128, "198.51.100.9", true},
    {"forged: client X-Real-IP behind a proxy that sets XFF (XFF first)", "10.0.0.1", kTrusted,
     {"X-Forwarded-For", "X-Real-IP"}, {{"X-Real-IP", "6.6.6.6"}, {"X-Forwarded-For", "198.51.100.9"}}, 128,
     "198.51.100.9", true},
    {"forged: client prepends Forwarded elements", "10.0.0.1", kTrusted, kFwd,
     {{"Forwarded", "for=6.6.6.6, for=\"[2001:db8:6::6]\", for=198.51.100.9"}}, 128, "198.51.100.9", true},
    {"forged: client X-Real-IP line before the proxy's (last one wins)", "10.0.0.1", kTrusted, kReal,
     {{"X-Real-IP", "6.6.6.6"}, {"X-Real-IP", "198.51.100.9"}}, 128, "198.51.100.9", true},
    {"forged: client opens a quote in XFF to swallow the proxy's entry", "10.0.0.1", kTrusted,
     {"X-Forwarded-For", "X-Real-IP"}, {{"X-Forwarded-For", "\"6.6.6.6, 198.51.100.9"}, {"X-Real-IP", "6.6.6.6"}},
     128, "198.51.100.9", true},

    // ---- X-Forwarded-For behind a trusted proxy ----------------------------------------
    {"XFF single entry", "10.0.0.1", kTrusted, kXff, {{"X-Forwarded-For", "198.51.100.9"}}, 128, "198.51.100.9",
     true},
    {"XFF trusted chain is skipped", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "198.51.100.9, 10.0.0.2, 10.0.0.3"}}, 128, "198.51.100.9", true},
    {"XFF all entries trusted: leftmost wins", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "10.0.0.5, 10.0.0.6"}}, 128, "10.0.0.5", true},
    {"XFF several lines concatenated, last line trusted", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "6.6.6.6, 198.51.100.9"}, {"X-Forwarded-For", "10.0.0.2, 10.0.0.3"}}, 128,
     "198.51.100.9", true},
    {"XFF lines interleaved with other fields", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "198.51.100.9"}, {"Host", "example.com"}, {"X-Forwarded-For", "10.0.0.2"}}, 128,
     "198.51.100.9", true},
    {"XFF empty entries and trailing comma are skipped", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "198.51.100.9, , 10.0.0.2,"}}, 128, "198.51.100.9", true},
    {"XFF 'unknown' right of the client ends the walk: peer", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "198.51.100.9, unknown, 10.0.0.2"}}, 128, "10.0.0.1", false},
    {"XFF 'unknown' hop: next configured header is tried", "10.0.0.1", kTrusted, {"X-Forwarded-For", "X-Real-IP"},
     {{"X-Forwarded-For", "198.51.100.9, unknown"}, {"X-Real-IP", "192.0.2.44"}}, 128, "192.0.2.44", true},
    {"XFF 'unknown' left of the client is never reached", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "unknown, 198.51.100.9, 10.0.0.2"}}, 128, "198.51.100.9", true},
    {"XFF garbage hop ends the walk", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "198.51.100.9, not-an-ip, 10.0.0.2"}}, 128, "10.0.0.1", false},
    {"XFF obfuscated '_hidden' hop ends the walk", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "198.51.100.9, _hidden"}}, 128, "10.0.0.1", false},
    {"XFF only empty entries yields nothing", "10.0.0.1", kTrusted, {"X-Forwarded-For", "X-Real-IP"},
     {{"X-Forwarded-For", " , ,"}, {"X-Real-IP", "192.0.2.44"}}, 128, "192.0.2.44", true},
    {"XFF IPv4 port stripped", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "198.51.100.9:4711, 10.0.0.2:80"}}, 128, "198.51.100.9", true},
    {"XFF bracketed IPv6 with port", "10.0.0.1", kTrusted, kXff, {{"X-Forwarded-For", "[2001:db8:1::5]:443"}},
     128, "2001:db8:1::5", true},
    {"XFF bare IPv6", "10.0.0.1", kTrusted, kXff, {{"X-Forwarded-For", "2001:db8:1:2:3:4:5:6"}}, 128,
     "2001:db8:1:2:3:4:5:6", true},
    {"XFF v4-mapped entry normalised", "10.0.0.1", kTrusted, kXff, {{"X-Forwarded-For", "::ffff:198.51.100.9"}},
     128, "198.51.100.9", true},
    {"XFF v4-mapped trusted hop is skipped", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "198.51.100.9, ::ffff:10.0.0.2"}}, 128, "198.51.100.9", true},
    {"XFF trusted IPv6 hop is skipped", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "198.51.100.9, 2001:db8:ffff::2"}}, 128, "198.51.100.9", true},
    {"XFF header name is case-insensitive", "10.0.0.1", kTrusted, kXff, {{"x-forwarded-for", "198.51.100.9"}}, 128,
     "198.51.100.9", true},
    {"XFF zone id rejected (link-local)", "10.0.0.1", kTrusted, kXff, {{"X-Forwarded-For", "fe80::1%eth0"}}, 128,
     "10.0.0.1", false},
    {"XFF zone id rejected (global, unknown interface)", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "2001:db8:1::5%nosuchif"}}, 128, "10.0.0.1", false},
    {"XFF IPv6 keyed by /64", "10.0.0.1", kTrusted, kXff, {{"X-Forwarded-For", "2001:db8:1:2:aaaa:bbbb:cccc:dddd"}},
     64, "2001:db8:1:2::/64", true},
    {"XFF IPv4 key stays the plain address with ipv6_prefix", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "198.51.100.9"}}, 64, "198.51.100.9", true},
    {"XFF v4-mapped key stays IPv4 with ipv6_prefix", "10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "::ffff:198.51.100.9"}}, 56, "198.51.100.9", true},

    // ---- trusted peers in other forms ---------------------------------------------------
    {"v4-mapped peer inside trusted v4 range", "::ffff:10.0.0.1", kTrusted, kXff,
     {{"X-Forwarded-For", "198.51.100.9"}}, 128, "198.51.100.9", true},
    {"trusted IPv6 peer", "2001:db8:ffff::1", kTrusted, kXff, {{"X-Forwarded-For", "198.51.100.9"}}, 128,
     "198.51.100.9", true},
    {"trusted peer without any header is the client", "10.0.0.1", kTrusted, kAll, {{"Host", "example.com"}}, 128,
     "10.0.0.1", false},
    {"trusted peer, no headers configured", "10.0.0.1", kTrusted, {}, {{"X-Forwarded-For", "198.51.100.9"}}, 128,
     "10.0.0.1", false},
    {"trusted IPv6 peer falls back to itself, keyed by /48", "2001:db8:ffff:1::1", kTrusted, kXff, {}, 48,
     "2001:db8:ffff::/48", false},

    // ---- Forwarded (RFC 7239) -----------------------------------------------------------
    {"Forwarded plain for=", "10.0.0.1", kTrusted, kFwd, {{"Forwarded", "for=198.51.100.9"}}, 128, "198.51.100.9",
     true},
    {"Forwarded quoted IPv6 with port", "10.0.0.1", kTrusted, kFwd, {{"Forwarded", "for=\"[2001:db8:1::7]:4711\""}},
     128, "2001:db8:1::7", true},
    {"Forwarded quoted IPv6 without port", "10.0.0.1", kTrusted, kFwd, {{"Forwarded", "for=\"[2001:db8:1::7]\""}},
     128, "2001:db8:1::7", true},
    {"Forwarded quoted IPv4 with port", "10.0.0.1", kTrusted, kFwd, {{"Forwarded", "for=\"198.51.100.9:8080\""}},
     128, "198.51.100.9", true},
    {"Forwarded mixed-case parameter names", "10.0.0.1", kTrusted, kFwd,
     {{"Forwarded", "For=6.6.6.6;Proto=https, FOR=198.51.100.9;By=10.0.0.1"}}, 128, "198.51.100.9", true},
    {"Forwarded for= not the first parameter", "10.0.0.1", kTrusted, kFwd,
     {{"Forwarded", "by=10.0.0.1;host=example.com;for=198.51.100.9;proto=http"}}, 128, "198.51.100.9", true},
    {"Forwarded trusted chain is skipped", "10.0.0.1", kTrusted, kFwd,
     {{"Forwarded", "for=198.51.100.9, for=10.0.0.2, for=\"[2001:db8:ffff::3]:80\""}}, 128, "198.51.100.9", true},
    {"Forwarded several lines concatenated", "10.0.0.1", kTrusted, kFwd,
     {{"Forwarded", "for=6.6.6.6"}, {"Forwarded", "for=198.51.100.9"}, {"forwarded", "for=10.0.0.2"}}, 128,
     "198.51.100.9", true},
    {"Forwarded all trusted: leftmost wins", "10.0.0.1", kTrusted, kFwd,
     {{"Forwarded", "for=10.0.0.7, for=10.0.0.8"}}, 128, "10.0.0.7", true},
    {"Forwarded for=unknown ends the walk: peer", "10.0.0.1", kTrusted, kFwd,
     {{"Forwarded", "for=198.51.100.9, for=unknown"}}, 128, "10.0.0.1", false},
    {"Forwarded obfuscated for=_x: next header", "10.0.0.1", kTrusted, {"Forwarded", "X-Real-IP"},
     {{"Forwarded", "for=198.51.100.9, for=_hidden"}, {"X-Real-IP", "192.0.2.44"}}, 128, "192.0.2.44", true},
    {"Forwarded element without for= ends the walk", "10.0.0.1", kTrusted, kFwd,
     {{"Forwarded", "for=198.51.100.9, by=10.0.0.2;proto=http"}}, 128, "10.0.0.1", false},
    {"Forwarded obfuscated hop left of the client is never reached", "10.0.0.1", kTrusted, kFwd,
     {{"Forwarded", "for=_secret, for=198.51.100.9"}}, 128, "198.51.100.9", true},
    {"Forwarded v4-mapped in brackets normalised", "10.0.0.1", kTrusted, kFwd,
     {{"Forwarded", "for=\"[::ffff:198.51.100.9]:99\""}}, 128, "198.51.100.9", true},
    {"Forwarded IPv6 keyed by /64", "10.0.0.1", kTrusted, kFwd,
     {{"Forwarded", "for=\"[2001:db8:1:2:3:4:5:6]:4711\""}}, 64, "2001:db8:1:2::/64", true},

    // ---- header order preference ----------------------------------------------------------
    {"order: X-Real-IP configured before XFF wins", "10.0.0.1", kTrusted, {"X-Real-IP", "X-Forwarded-For"},
     {{"X-Forwarded-For", "198.51.100.9"}, {"X-Real-IP", "192.0.2.44"}}, 128, "192.0.2.44", true},
    {"order: XFF configured before X-Real-IP wins", "10.0.0.1", kTrusted, {"X-Forwarded-For", "X-Real-IP"},
     {{"X-Real-IP", "192.0.2.44"}, {"X-Forwarded-For", "198.51.100.9"}}, 128, "198.51.100.9", true},
    {"order: Forwarded configured before XFF wins", "10.0.0.1", kTrusted, {"Forwarded", "X-Forwarded-For"},
     {{"X-Forwarded-For", "198.51.100.9"}, {"Forwarded", "for=192.0.2.44"}}, 128, "192.0.2.44", true},
    {"order: first configured header absent, second used", "10.0.0.1", kTrusted, kAll,
     {{"WL-Proxy-Client-IP", "192.0.2.44"}}, 128, "192.0.2.44", true},
    {"order: unconfigured header is ignored", "10.0.0.1", kTrusted, kXff, {{"X-Real-IP", "192.0.2.44"}}, 128,
     "10.0.0.1", false},

    // ---- single-value headers ---------------------------------------------------------------
    {"X-Real-IP plain", "10.0.0.1", kTrusted, kReal, {{"X-Real-IP", "198.51.100.9"}}, 128, "198.51.100.9", true},
    {"X-Real-IP last occurrence empty: yields nothing", "10.0.0.1", kTrusted, kReal,
     {{"X-Real-IP", "198.51.100.9"}, {"X-Real-IP", ""}}, 128, "10.0.0.1", false},
    {"X-Real-IP 'unknown': next header", "10.0.0.1", kTrusted, {"X-Real-IP", "X-Forwarded-For"},
     {{"X-Real-IP", "unknown"}, {"X-Forwarded-For", "198.51.100.9"}}, 128, "198.51.100.9", true},
    {"X-Real-IP garbage: next header", "10.0.0.1", kTrusted, {"X-Real-IP", "Proxy-Client-IP"},
     {{"X-Real-IP", "1.2.3.4.5"}, {"Proxy-Client-IP", "198.51.100.9"}}, 128, "198.51.100.9", true},
    {"X-Real-IP list value is not an address", "10.0.0.1", kTrusted, kReal,
     {{"X-Real-IP", "6.6.6.6, 198.51.100.9"}}, 128, "10.0.0.1", false},
    {"X-Real-IP port stripped", "10.0.0.1", kTrusted, kReal, {{"X-Real-IP", "198.51.100.9:8080"}}, 128,
     "198.51.100.9", true},
    {"X-Real-IP bracketed IPv6 port stripped", "10.0.0.1", kTrusted, kReal, {{"X-Real-IP", "[::1]:80"}}, 128, "::1",
     true},
    {"X-Real-IP v4-mapped normalised", "10.0.0.1", kTrusted, kReal, {{"X-Real-IP", "::ffff:198.51.100.9"}}, 128,
     "198.51.100.9", true},
    {"X-Real-IP zone id rejected", "10.0.0.1", kTrusted, kReal, {{"X-Real-IP", "fe80::1%1"}}, 128, "10.0.0.1",
     false},
    {"X-Real-IP IPv6 keyed by /48", "10.0.0.1", kTrusted, kReal, {{"X-Real-IP", "2001:db8:1:2::9"}}, 48,
     "2001:db8:1::/48", true},
    {"x-real-ip name case-insensitive", "10.0.0.1", kTrusted, kReal, {{"x-real-ip", "198.51.100.9"}}, 128,
     "198.51.100.9", true},
    {"Proxy-Client-IP", "10.0.0.1", kTrusted, {"Proxy-Client-IP"}, {{"Proxy-Client-IP", "198.51.100.9"}}, 128,
     "198.51.100.9", true},
    {"WL-Proxy-Client-IP", "10.0.0.1", kTrusted, {"WL-Proxy-Client-IP"}, {{"WL-Proxy-Client-IP", "198.51.100.9"}},
     128, "198.51.100.9", true},
    {"HTTP_CLIENT_IP", "10.0.0.1", kTrusted, {"HTTP_CLIENT_IP"}, {{"HTTP_CLIENT_IP", "198.51.100.9"}}, 128,
     "198.51.100.9", true},
    {"custom single-value header name", "10.0.0.1", kTrusted, {"CF-Connecting-IP"},
     {{"CF-Connecting-IP", "2001:db8:77::1"}}, 128, "2001:db8:77::1", true},

    // ---- IPv6 prefix keys of peers ------------------------------------------------------------
    {"untrusted IPv6 peer keyed by /56", "2001:db8:5:6ff::1", kTrusted, kAll, {}, 56, "2001:db8:5:600::/56",
     false},
    {"untrusted IPv6 peer keyed by /128 is the address", "2001:db8:5:6ff::1", kTrusted, kAll, {}, 128,
     "2001:db8:5:6ff::1", false},
};

}  // namespace

TEST_CASE("client_ip_resolver: table of peers, trusted proxies and headers", "[client_ip]") {
  REQUIRE(kCases.size() >= 50);
  for (const auto& c : kCases) {
    DYNAMIC_SECTION(c.description) {
      INFO("case: " << c.description);
      INFO("peer: " << c.peer << ", ipv6_prefix: " << c.ipv6_prefix << ", fields:" << describe(c.fields));
      client_ip_resolver resolver(make_set(c.trusted), c.headers, c.ipv6_prefix);
      auto id = resolve(resolver, c.peer, c.fields).who;
      CHECK(id.key == c.expected_key);
      CHECK(id.from_header == c.expected_from_header);
      CHECK(resolver.key_of(id.ip) == id.key);
    }
  }
}

TEST_CASE("client_ip_resolver: resolved address and trust", "[client_ip]") {
  client_ip_resolver resolver(make_set(kTrusted), kAll, 64);
  const std::vector<header_field> none;
  CHECK(resolve(resolver, "10.200.0.1", none).peer_trusted);
  CHECK(resolve(resolver, "::ffff:10.200.0.1", none).peer_trusted);
  CHECK_FALSE(resolve(resolver, "203.0.113.7", none).peer_trusted);
  CHECK(resolver.identity_fields() == kAll);

  std::vector<header_field> fields = {{"X-Forwarded-For", "2001:db8:1:2:3:4:5:6, 10.0.0.2"}};
  auto id = resolve(resolver, "::ffff:10.0.0.1", fields).who;
  CHECK(id.ip == ip("2001:db8:1:2:3:4:5:6"));  // the address itself, the key is the network
  CHECK(id.key == "2001:db8:1:2::/64");
  CHECK(id.from_header);

  auto peer = resolve(resolver, "::ffff:203.0.113.7", fields).who;
  CHECK(peer.ip == ip("203.0.113.7"));
  CHECK(peer.ip.is_v4());
  CHECK_FALSE(peer.from_header);

  client_ip_resolver defaulted;  // no trusted proxies, no headers
  auto d = resolve(defaulted, "10.0.0.1", fields).who;
  CHECK(d.key == "10.0.0.1");
  CHECK_FALSE(d.from_header);
  CHECK(defaulted.key_of(ip("2001:db8::1")) == "2001:db8::1");
}

TEST_CASE("parse_cidr", "[client_ip]") {
  struct good_case {
    const char* text;
    const char* base;
    unsigned prefix;
  };
  const good_case good[] = {
      {"10.0.0.0/8", "10.0.0.0", 8},
      {"10.1.2.3/8", "10.0.0.0", 8},  // host bits masked
      {"192.168.1.77/24", "192.168.1.0", 24},
      {"172.16.5.4/12", "172.16.0.0", 12},
      {"1.2.3.4", "1.2.3.4", 32},
      {"1.2.3.4/32", "1.2.3.4", 32},
      {"255.255.255.255/0", "0.0.0.0", 0},
      {"  10.0.0.0/8\t", "10.0.0.0", 8},
      {"2001:db8::/32", "2001:db8::", 32},
      {"2001:db8:abcd:1234::1/32", "2001:db8::", 32},
      {"2001:db8:1:2:3:4:5:6/64", "2001:db8:1:2::", 64},
      {"2001:db8::1", "2001:db8::1", 128},
      {"::/0", "::", 0},
      {"fe80::1/10", "fe80::", 10},
  };
  for (const auto& g : good) {
    DYNAMIC_SECTION("good: " << g.text) {
      auto c = fg::net::parse_cidr(g.text);
      REQUIRE(c);
      CHECK(c->base == ip(g.base));
      CHECK(c->prefix == g.prefix);
    }
  }

  const char* bad[] = {"",
                       "/8",
                       "10.0.0.0/",
                       "10.0.0.0/33",
                       "10.0.0.0/99999999999999999999",
                       "10.0.0.0/-1",
                       "10.0.0.0/+8",
                       "10.0.0.0/ 8",
                       "10.0.0.0/8x",
                       "10.0.0.0/8/8",
                       "10.0.0/8",
                       "300.0.0.0/8",
                       "example.com/8",
                       "2001:db8::/129",
                       "2001:db8::/",
                       "fe80::1%eth0/64",
                       "2001:db8::1%nosuchif"};
  for (const char* b : bad) {
    DYNAMIC_SECTION("bad: '" << b << "'") { CHECK_FALSE(fg::net::parse_cidr(b)); }
  }
}

TEST_CASE("cidr::contains and cidr_set::contains", "[client_ip]") {
  SECTION("single cidr") {
    auto c = fg::net::parse_cidr("10.0.0.0/8");
    REQUIRE(c);
    CHECK(c->contains(ip("10.0.0.0")));
    CHECK(c->contains(ip("10.255.255.255")));
    CHECK(c->contains(ip("::ffff:10.1.2.3")));  // v4-mapped
    CHECK_FALSE(c->contains(ip("11.0.0.0")));
    CHECK_FALSE(c->contains(ip("9.255.255.255")));
    CHECK_FALSE(c->contains(ip("::a00:1")));  // 10.0.0.1 bits, but IPv6 (v4-compatible, not mapped)

    auto v6 = fg::net::parse_cidr("2001:db8::/32");
    REQUIRE(v6);
    CHECK(v6->contains(ip("2001:db8:ffff::1")));
    CHECK_FALSE(v6->contains(ip("2001:db9::1")));
    CHECK_FALSE(v6->contains(ip("32.1.13.184")));  // 0x20010db8 as IPv4

    auto all4 = fg::net::parse_cidr("0.0.0.0/0");
    REQUIRE(all4);
    CHECK(all4->contains(ip("203.0.113.7")));
    CHECK(all4->contains(ip("::ffff:203.0.113.7")));
    CHECK_FALSE(all4->contains(ip("2001:db8::1")));

    auto host = fg::net::parse_cidr("192.0.2.1");
    REQUIRE(host);
    CHECK(host->contains(ip("192.0.2.1")));
    CHECK_FALSE(host->contains(ip("192.0.2.2")));
  }

  SECTION("set") {
    cidr_set empty;
    CHECK(empty.empty());
    CHECK_FALSE(empty.contains(ip("10.0.0.1")));
    CHECK_FALSE(empty.contains(ip("::1")));

    auto set = make_set({"10.0.0.0/8", "192.168.0.0/16", "2001:db8:ffff::/48", "::1"});
    CHECK_FALSE(set.empty());
    CHECK(set.contains(ip("10.1.2.3")));
    CHECK(set.contains(ip("192.168.44.1")));
    CHECK(set.contains(ip("::ffff:10.1.2.3")));
    CHECK(set.contains(ip("::ffff:192.168.0.1")));
    CHECK(set.contains(ip("2001:db8:ffff:1::1")));
    CHECK(set.contains(ip("::1")));
    CHECK_FALSE(set.contains(ip("::2")));
    CHECK_FALSE(set.contains(ip("::ffff:11.0.0.1")));
    CHECK_FALSE(set.contains(ip("172.16.0.1")));
    CHECK_FALSE(set.contains(ip("2001:db8:fffe::1")));
    CHECK_FALSE(set.contains(ip("127.0.0.1")));  // ::1 does not cover IPv4 loopback

    auto v6only = make_set({"::/0"});
    CHECK(v6only.contains(ip("2001:db8::1")));
    CHECK_FALSE(v6only.contains(ip("::ffff:1.2.3.4")));  // normalised to IPv4 first
  }

  SECTION("normalize") {
    CHECK(fg::net::normalize(ip("::ffff:1.2.3.4")) == ip("1.2.3.4"));
    CHECK(fg::net::normalize(ip("::ffff:1.2.3.4")).is_v4());
    CHECK(fg::net::normalize(ip("2001:db8::1")) == ip("2001:db8::1"));
    CHECK(fg::net::normalize(ip("1.2.3.4")) == ip("1.2.3.4"));
  }
}

TEST_CASE("parse_forwarded_address", "[client_ip]") {
  struct good_case {
    const char* text;
    const char* expected;
  };
  const good_case good[] = {
      {"1.2.3.4", "1.2.3.4"},
      {"  1.2.3.4\t", "1.2.3.4"},
      {"1.2.3.4:8080", "1.2.3.4"},
      {"\"1.2.3.4:8080\"", "1.2.3.4"},
      {"::1", "::1"},
      {"[::1]", "::1"},
      {"[::1]:80", "::1"},
      {"\"[2001:db8::1]:4711\"", "2001:db8::1"},
      {"\" [2001:db8::1] \"", "2001:db8::1"},
      {"2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"},
      {"::ffff:1.2.3.4", "1.2.3.4"},
      {"[::ffff:1.2.3.4]:80", "1.2.3.4"},
  };
  for (const auto& g : good) {
    DYNAMIC_SECTION("good: " << g.text) {
      auto a = fg::net::parse_forwarded_address(g.text);
      REQUIRE(a);
      CHECK(*a == ip(g.expected));
      CHECK(a->is_v4() == ip(g.expected).is_v4());
    }
  }

  const char* bad[] = {"",
                       "   ",
                       "\"\"",
                       "unknown",
                       "_hidden",
                       "example.com",
                       "example.com:80",
                       "1.2.3",
                       "256.1.1.1",
                       "1.2.3.4.5",
                       "1.2.3.4:80:90",
                       "[1.2.3.4]:80",
                       "[::1",
                       "[::1]x",
                       "[::1]80",
                       "[]",
                       "[]:80",
                       "fe80::1%eth0",
                       "fe80::1%1",
                       "[fe80::1%eth0]:80",
                       "2001:db8::1%nosuchif",
                       "2001:db8::1%0"};
  for (const char* b : bad) {
    DYNAMIC_SECTION("bad: '" << b << "'") { CHECK_FALSE(fg::net::parse_forwarded_address(b)); }
  }
}

TEST_CASE("forwarded_for_values", "[client_ip]") {
  using sv = std::string_view;
  auto values = [](sv header) {
    std::vector<sv> out;
    fg::net::forwarded_for_values(header, out);
    return out;
  };

  SECTION("one element") { CHECK(values("for=192.0.2.60") == std::vector<sv>{"192.0.2.60"}); }
  SECTION("parameters around for=") {
    CHECK(values("proto=http;for=192.0.2.60;by=203.0.113.43") == std::vector<sv>{"192.0.2.60"});
  }
  SECTION("several elements, quoted values kept quoted") {
    CHECK(values("for=192.0.2.43, for=\"[2001:db8:cafe::17]:4711\";proto=https") ==
          std::vector<sv>{"192.0.2.43", "\"[2001:db8:cafe::17]:4711\""});
  }
  SECTION("case-insensitive parameter name, spaces trimmed") {
    CHECK(values(" For=1.2.3.4 ; proto=http ,FOR=5.6.7.8") == std::vector<sv>{"1.2.3.4", "5.6.7.8"});
  }
  SECTION("element without for= keeps its place as an empty value") {
    CHECK(values("for=1.2.3.4, by=10.0.0.1;proto=http, for=5.6.7.8") == std::vector<sv>{"1.2.3.4", "", "5.6.7.8"});
  }
  SECTION("comma and semicolon inside quotes do not split") {
    CHECK(values("for=\"a,b;c\";proto=http, for=unknown") == std::vector<sv>{"\"a,b;c\"", "unknown"});
  }
  SECTION("first for= of an element wins") { CHECK(values("for=1.1.1.1;for=2.2.2.2") == std::vector<sv>{"1.1.1.1"}); }
  SECTION("parameter merely ending in 'for' is not for=") {
    CHECK(values("xfor=1.1.1.1;for=2.2.2.2") == std::vector<sv>{"2.2.2.2"});
  }
  SECTION("obfuscated and unknown are returned verbatim") {
    CHECK(values("for=_hidden, for=unknown") == std::vector<sv>{"_hidden", "unknown"});
  }
  SECTION("appends to the output (several header lines)") {
    std::vector<sv> out;
    fg::net::forwarded_for_values("for=1.1.1.1", out);
    fg::net::forwarded_for_values("for=2.2.2.2, for=3.3.3.3", out);
    CHECK(out == std::vector<sv>{"1.1.1.1", "2.2.2.2", "3.3.3.3"});
  }
}

TEST_CASE("client_ip_resolver::resolve: what the upstream is told", "[client_ip]") {
  client_ip_resolver r(make_set(kTrusted), kAll, 128);
  auto tell = [&](const char* peer, std::vector<header_field> fields, bool full) {
    // As the forwarder sends them: X-Forwarded-For is the peer alone when none is given.
    auto v = resolve(r, peer, fields, full);
    return std::pair{v.xff.empty() ? std::string(peer) : v.xff, v.forwarded};
  };
  SECTION("an untrusted peer's chain is dropped whole") {
    auto [xff, fwd] = tell("203.0.113.7", {{"X-Forwarded-For", "6.6.6.6"}, {"Forwarded", "for=6.6.6.6"}}, false);
    CHECK(xff == "203.0.113.7");
    CHECK(fwd.empty());
    std::tie(xff, fwd) = tell("203.0.113.7", {{"X-Forwarded-For", "6.6.6.6"}}, true);
    CHECK(xff == "203.0.113.7");
  }
  SECTION("behind a trusted proxy the chain starts at the client: a forged first value is gone") {
    auto [xff, fwd] = tell("10.0.0.1", {{"X-Forwarded-For", "6.6.6.6, 198.51.100.9"}}, false);
    CHECK(xff == "198.51.100.9, 10.0.0.1");
    // Trusted hops after the client are kept, in order.
    std::tie(xff, fwd) = tell("10.0.0.1", {{"X-Forwarded-For", "6.6.6.6, 198.51.100.9:4711, 10.1.1.1"}}, false);
    CHECK(xff == "198.51.100.9, 10.1.1.1, 10.0.0.1");
  }
  SECTION("full keeps the proxy's chain") {
    auto [xff, fwd] = tell("10.0.0.1", {{"X-Forwarded-For", "6.6.6.6, 198.51.100.9"}, {"Forwarded", "for=1.2.3.4"}}, true);
    CHECK(xff == "6.6.6.6, 198.51.100.9, 10.0.0.1");
    CHECK(fwd == "for=1.2.3.4");
  }
  SECTION("Forwarded keeps the elements from the client's on") {
    auto [xff, fwd] = tell("10.0.0.1", {{"Forwarded", "for=6.6.6.6, for=198.51.100.9;proto=https, for=10.2.2.2"}}, false);
    CHECK(fwd == "for=198.51.100.9;proto=https, for=10.2.2.2");
    CHECK(xff == "198.51.100.9, 10.0.0.1");
  }
  SECTION("a client found in another header starts X-Forwarded-For") {
    auto [xff, fwd] = tell("10.0.0.1", {{"X-Real-IP", "198.51.100.9"}, {"Forwarded", "for=unknown"}}, false);
    CHECK(xff == "198.51.100.9, 10.0.0.1");
    CHECK(fwd.empty());
  }
  SECTION("a trusted peer that names no client") {
    auto [xff, fwd] = tell("10.0.0.1", {}, false);
    CHECK(xff == "10.0.0.1");
  }
}
