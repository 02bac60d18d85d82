// Tests for the configuration loader: every bad configuration is reported at the
// right line and column with a helpful message; good ones land in the structs.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "config/duration.hpp"
#include "config/loader.hpp"

namespace cfg = fg::config;
using namespace std::chrono_literals;

namespace {

// A minimal valid configuration, built in pieces so each case can extend it at a
// known line.  Lines 1-3: upstreams; 4: routes:; 5-8: route 'r'; 9: limits:.
const std::string kUpstreams = "upstreams:\n  api:\n    address: \"127.0.0.1:9000\"\n";
const std::string kRoutesHead = kUpstreams + "routes:\n";
const std::string kRoute = "  - name: r\n    match:\n      path: /x\n    upstream: api\n";
const std::string kRoutes = kRoutesHead + kRoute;
const std::string kLimitsHead = kRoutes + "    limits:\n";
// Lines 10-13 after kLimitsHead: a valid fixed_window limit named 'l'.
const std::string kLimit = "      - name: l\n        algorithm: fixed_window\n        limit: 5\n        window: 1s\n";

cfg::load_result load(const std::string& text) { return cfg::load_string(text, "test.yaml"); }

std::string describe(const cfg::load_result& r) {
  std::string s;
  for (const auto& e : r.errors) s += e.str() + "\n";
  return s;
}

struct bad_case {
  const char* what;
  std::string text;
  int line;
  int column;
  std::string message;
};

}  // namespace

TEST_CASE("the minimal base configuration used by the bad-config table is valid", "[config]") {
  for (const auto& text : {kRoutes, kLimitsHead + kLimit}) {
    auto r = load(text);
    INFO(describe(r));
    REQUIRE(r.ok());
    CHECK(r.cfg->source == "test.yaml");
    REQUIRE(r.cfg->routes.size() == 1);
    CHECK(r.cfg->routes[0].match.path == "/x");
  }
}

TEST_CASE("bad configurations report the first problem with line, column and message", "[config]") {
  const std::string routes_rest = kRoutes.substr(kUpstreams.size());  // "routes:" + route, lines 4-8 after 3 upstream lines
  const std::vector<bad_case> cases = {
      // --- unknown keys, with and without a hint
      {"unknown top-level key with hint", "listn: \"0.0.0.0:1\"\n" + kRoutes, 1, 1,
       "unknown key 'listn' (did you mean 'listen'?)"},
      {"unknown key differing only in case", "Listen: \"0.0.0.0:1\"\n" + kRoutes, 1, 1,
       "unknown key 'Listen' (did you mean 'listen'?)"},
      {"unknown key with no plausible hint", "foo: 1\n" + kRoutes, 1, 1, "unknown key 'foo'"},
      {"unknown nested key (transposed letters)", "log:\n  levle: info\n" + kRoutes, 2, 3,
       "unknown key 'levle' (did you mean 'level'?)"},
      {"unknown key inside match", kRoutesHead + "  - name: r\n    match:\n      path: /x\n      method: [GET]\n    upstream: api\n",
       8, 7, "unknown key 'method' (did you mean 'methods'?)"},
      {"unknown key inside a limit", kLimitsHead + kLimit + "        cots: 2\n", 14, 9,
       "unknown key 'cots' (did you mean 'cost'?)"},
      {"a delay longer than a drain", "http:\n  drain_timeout: 5s\n" + kLimitsHead +
           "      - name: l\n        algorithm: gcra\n        rate: 5/s\n        burst: 1\n        on_exceed: delay\n"
           "        max_delay: 5s\n",
       17, 20, "max_delay must be shorter than http.drain_timeout (5000ms): a drain would cut the waits"},
      {"a client_cert key without client certificates", kLimitsHead + kLimit + "        key: client_cert\n", 14, 14,
       "key client_cert needs tls.client_ca: without it no request carries a verified certificate, and every request "
       "would share one key"},
      {"duplicate top-level key", "listen: \"0.0.0.0:1\"\nlisten: \"0.0.0.0:2\"\n" + kRoutes, 2, 1, "duplicate key 'listen'"},
      {"a sample ratio past 1", "tracing:\n  sample_ratio: 1.5\n" + kRoutes, 2, 17,
       "invalid ratio from 0 to 1 '1.5' (e.g. 0.01)"},
      {"an unknown trust", "tracing:\n  trust_incoming: everyone\n" + kRoutes, 2, 19,
       "invalid value 'everyone', expected one of trusted_proxies|always|never"},
      {"span export without propagation", "tracing:\n  export:\n    endpoint: http://127.0.0.1:4318\n" + kRoutes, 3, 5,
       "tracing.export needs tracing.propagate: true"},
      {"span export over https", "tracing:\n  propagate: true\n  export:\n    endpoint: https://c:4318/v1/traces\n" + kRoutes,
       4, 15,
       "tracing.export.endpoint: only http:// URLs are taken (want e.g. http://127.0.0.1:4318/v1/traces; https is not "
       "supported: send to a collector on this machine or in this pod)"},
      {"span export without an endpoint", "tracing:\n  propagate: true\n  export:\n    batch: 10\n" + kRoutes, 4, 5,
       "tracing.export needs endpoint (the collector's OTLP/HTTP URL, e.g. http://127.0.0.1:4318/v1/traces)"},
      {"span export batch of 0", "tracing:\n  propagate: true\n  export:\n    endpoint: http://c\n    batch: 0\n" + kRoutes,
       5, 12, "expected an integer from 1 to 10000, got '0'"},
      // --- durations, sizes, integers
      {"duration without unit", "http:\n  header_timeout: 5\n" + kRoutes, 2, 19,
       "invalid duration '5' (want e.g. 250ms, 5s, 1m, 1h)"},
      {"duration with a space", "http:\n  idle_timeout: 5 s\n" + kRoutes, 2, 17,
       "invalid duration '5 s' (want e.g. 250ms, 5s, 1m, 1h)"},
      {"duration with unknown unit",
       kUpstreams + "    connect_timeout: 1y\n" + routes_rest, 4, 22,
       "invalid duration '1y' (want e.g. 250ms, 5s, 1m, 1h)"},
      {"zero duration", "http:\n  header_timeout: 0s\n" + kRoutes, 2, 19, "duration must be greater than zero"},
      {"max_header_bytes too small", "http:\n  max_header_bytes: 512\n" + kRoutes, 2, 21,
       "max_header_bytes must be from 1024 to 1048576"},
      {"bad size", "http:\n  max_body_bytes: lots\n" + kRoutes, 2, 19, "invalid size 'lots' (want e.g. 0, 1048576 or 10m)"},
      {"negative workers", "workers: -1\n" + kRoutes, 1, 10, "expected an integer from 0 to 256, got '-1'"},
      {"ipv6_prefix above 128", "client_ip:\n  ipv6_prefix: 129\n" + kRoutes, 2, 16,
       "expected an integer from 1 to 128, got '129'"},
      {"ipv6_prefix zero", "client_ip:\n  ipv6_prefix: 0\n" + kRoutes, 2, 16, "expected an integer from 1 to 128, got '0'"},
      {"forward naming a framing header", "client_ip:\n  forward: Content-Length\n" + kRoutes, 2, 12,
       "client_ip.forward cannot be 'Content-Length': the gateway reads or sets that header itself"},
      {"forward naming Host with an underscore", "client_ip:\n  forward: host\n" + kRoutes, 2, 12,
       "client_ip.forward cannot be 'host': the gateway reads or sets that header itself"},
      {"forward_chain unknown", "client_ip:\n  forward_chain: all\n" + kRoutes, 2, 18,
       "forward_chain must be from_client or full"},
      {"max_connections negative", "http:\n  max_connections: -5\n" + kRoutes, 2, 20,
       "expected an integer from 0 to 10000000, got '-5'"},
      {"memory.max_keys too small", "memory:\n  max_keys: 10\n" + kRoutes, 2, 13,
       "expected an integer from 1024 to 100000000, got '10'"},
      {"tls without listen", "tls:\n  certificates: [{cert: a.pem, key: a.key}]\n" + kRoutes, 2, 3,
       "tls needs listen (the address of the TLS listener, e.g. \"0.0.0.0:8443\")"},
      {"tls without certificates", "tls:\n  listen: \"127.0.0.1:8443\"\n  certificates: []\n" + kRoutes, 3, 17,
       "tls needs certificates: a list of {cert, key} (PEM files), the first one the default"},
      {"tls certificate without key", "tls:\n  listen: \"127.0.0.1:8443\"\n  certificates:\n    - {cert: a.pem}\n" +
       kRoutes, 4, 7, "a certificate needs cert and key (PEM file paths)"},
      {"resolver server by name", "resolver:\n  servers: [\"dns.local:53\"]\n" + kRoutes, 2, 13,
       "name server 'dns.local' is not an IP address"},
      {"resolver refresh too short", "resolver:\n  refresh: 100ms\n" + kRoutes, 2, 12,
       "resolver.refresh must be from 1000ms to 86400s"},
      {"resolver tries zero", "resolver:\n  tries: 0\n" + kRoutes, 2, 10, "expected an integer from 1 to 10, got '0'"},
      // --- endpoints
      {"listen without host", "listen: 8080\n" + kRoutes, 1, 9, "invalid listen address '8080' (want host:port)"},
      {"admin listen without port", "admin:\n  listen: \"localhost\"\n" + kRoutes, 2, 11,
       "invalid listen address 'localhost' (want host:port)"},
      {"upstream port out of range", "upstreams:\n  api:\n    address: \"127.0.0.1:99999\"\n" + routes_rest, 3, 14,
       "invalid upstream address '127.0.0.1:99999' (want host:port)"},
      {"bad redis address in a list", "redis:\n  addresses: [\"127.0.0.1:6379\", \"nope\"]\n" + kRoutes, 2, 33,
       "invalid Redis address 'nope' (want host:port)"},
      {"empty redis address list", "redis:\n  addresses: []\n" + kRoutes, 2, 14, "redis.addresses must not be empty"},
      // --- enumerations
      {"bad log level", "log:\n  level: verbose\n" + kRoutes, 2, 10,
       "invalid value 'verbose', expected one of trace|debug|info|warn|error"},
      {"bad store with hint", "store: redsi\n" + kRoutes, 1, 8,
       "invalid value 'redsi', expected one of memory|redis (did you mean 'redis'?)"},
      {"redis sentinel without master_name", "redis:\n  mode: sentinel\n" + kRoutes, 2, 9,
       "redis.mode sentinel needs redis.master_name"},
      {"cluster with a database", "redis:\n  mode: cluster\n  database: 3\n" + kRoutes, 3, 13,
       "redis.database must be 0 with redis.mode cluster"},
      {"cluster with a brace in the key prefix", "redis:\n  mode: cluster\n  key_prefix: \"a{b}\"\n" + kRoutes, 3,
       15, "redis.key_prefix must not contain '{' or '}' with redis.mode cluster"},
      {"bad on_store_error", kRoutes + "    on_store_error: fail\n", 9, 21,
       "invalid value 'fail', expected one of allow|deny|local"},
      {"bad response headers mode", kRoutes + "    response:\n      headers: draft\n", 10, 16,
       "invalid value 'draft', expected one of ietf|legacy|both|none"},
      {"response status out of range", kRoutes + "    response:\n      status: 200\n", 10, 15,
       "expected an integer from 400 to 599, got '200'"},
      // --- client_ip
      {"bad CIDR", "client_ip:\n  trusted_proxies: [\"10.0.0.0/33\"]\n" + kRoutes, 2, 21,
       "invalid CIDR '10.0.0.0/33' (want e.g. 10.0.0.0/8 or 2001:db8::/32)"},
      {"bad forwarding header name", "client_ip:\n  headers: [\"X Real\"]\n" + kRoutes, 2, 13, "invalid header name 'X Real'"},
      {"null in a list", "client_ip:\n  trusted_proxies: [~]\n" + kRoutes, 2, 21, "expected a value"},
      // --- environment
      {"unset ${VAR}", "redis:\n  password: \"${FG_TEST_SURELY_UNSET}\"\n" + kRoutes, 2, 13,
       "environment variable FG_TEST_SURELY_UNSET is not set (use ${FG_TEST_SURELY_UNSET:-default} for a default)"},
      {"invalid ${...} reference", "redis:\n  password: \"${FG bad}\"\n" + kRoutes, 2, 13,
       "invalid environment variable reference '${FG bad}'"},
      {"unterminated ${", "redis:\n  password: \"${FG\"\n" + kRoutes, 2, 13, "unterminated '${' in value"},
      // --- document shape and wrong types
      {"YAML syntax error", "routes:\n  - name: a\n   match: x\n", 3, 4, "end of sequence not found"},
      {"empty document", "", 1, 1, "the configuration is empty"},
      {"top level is a list", "- a\n- b\n", 1, 1, "the configuration must be a mapping"},
      {"list where a mapping is expected", "http: [1, 2]\n" + kRoutes, 1, 7, "http must be a mapping"},
      {"list where a number is expected", "workers: [1]\n" + kRoutes, 1, 10, "expected a single value, got a list"},
      {"mapping where a number is expected", "workers: {a: 1}\n" + kRoutes, 1, 10, "expected a single value, got a mapping"},
      {"scalar where match mapping is expected", kRoutesHead + "  - name: r\n    match: /x\n    upstream: api\n", 6, 12,
       "match must be a mapping"},
      {"exact route shadowed by one without the trailing slash",
       kRoutes + "  - name: s\n    match:\n      path: /x/\n    upstream: api\n", 11, 13,
       "route 's' can never match: route 'r' before it takes /x/ too (an exact path also takes one trailing "
       "slash); list 's' first"},
      {"shadowed whatever the host's case, port or trailing dot",
       kRoutesHead + "  - name: r\n    match: {path: /x, host: A.example:8080}\n    upstream: api\n" +
           "  - name: s\n    match: {path: /x/, host: a.example.}\n    upstream: api\n",
       9, 19,
       "route 's' can never match: route 'r' before it takes /x/ too (an exact path also takes one trailing "
       "slash); list 's' first"},
      {"shadowed for its methods, HEAD by GET",
       kRoutesHead + "  - name: r\n    match: {path: /x, methods: [GET, POST]}\n    upstream: api\n" +
           "  - name: s\n    match: {path: /x/, methods: [HEAD, POST]}\n    upstream: api\n",
       9, 19,
       "route 's' can never match: route 'r' before it takes /x/ too (an exact path also takes one trailing "
       "slash); list 's' first"},
      {"';' in a path", kRoutesHead + "  - name: r\n    match:\n      path: /x;v=1\n    upstream: api\n", 7, 13,
       "a path cannot contain ';' (requests are matched with their path parameters, ';' up to the next '/', "
       "dropped, as servlet containers do: only a request spelling it %3B would match)"},
      {"a path normalisation changes", kRoutesHead + "  - name: r\n    match:\n      path: /a//b/../c\n    upstream: api\n",
       7, 13, "requests are matched normalised, so '/a//b/../c' is never seen: write '/a/c'"},
      {"a prefix normalisation changes", kRoutesHead + "  - name: r\n    match:\n      path_prefix: /%61pi/\n    upstream: api\n",
       7, 20, "requests are matched normalised, so '/%61pi/' is never seen: write '/api/'"},
      {"a path with a character requests cannot carry", kRoutesHead + "  - name: r\n    match:\n      path: \"/a b\"\n    upstream: api\n",
       7, 13, "invalid path '/a b'"},
      {"limits not a list", kLimitsHead + "      name: l\n", 10, 7, "limits must be a list"},
      {"too many limits", kLimitsHead + [] {
         std::string s;
         for (int i = 0; i < 65; ++i)
           s += "      - {name: l" + std::to_string(i) + ", algorithm: fixed_window, limit: 5, window: 1s}\n";
         return s;
       }(), 10, 7, "a route has at most 64 limits, this one has 65"},
      // --- upstreams
      {"missing routes", kUpstreams, 1, 1, "missing required key 'routes'"},
      {"upstreams as a list", "upstreams: [api]\n" + routes_rest, 1, 12, "upstreams must be a mapping of name to upstream"},
      {"upstream with no body", "upstreams:\n  api:\n" + routes_rest, 2, 3, "upstream 'api' needs an address or servers"},
      {"upstream as a scalar", "upstreams:\n  api: \"127.0.0.1:9000\"\n" + routes_rest, 2, 8, "upstream 'api' must be a mapping"},
      {"upstream missing address (typo)", "upstreams:\n  api:\n    adress: \"127.0.0.1:9000\"\n" + routes_rest, 2, 3,
       "upstream 'api' needs an address or servers"},
      {"duplicate upstream name", kUpstreams + "  api:\n    address: \"127.0.0.1:9001\"\n" + routes_rest, 4, 3,
       "duplicate upstream name 'api'"},
      {"address and servers", "upstreams:\n  api:\n    address: \"127.0.0.1:9000\"\n    servers: [\"127.0.0.1:9001\"]\n" +
       routes_rest, 4, 14, "upstream 'api' has both address and servers (use one)"},
      {"a server twice", "upstreams:\n  api:\n    servers: [\"127.0.0.1:9001\", \"127.0.0.1:9001\"]\n" + routes_rest, 3, 33,
       "server 127.0.0.1:9001 is listed twice in upstream 'api'"},
      {"servers empty", "upstreams:\n  api:\n    servers: []\n" + routes_rest, 3, 14,
       "servers must be a list of {address, weight} (at least one)"},
      {"a server without an address", "upstreams:\n  api:\n    servers: [{weight: 2}]\n" + routes_rest, 3, 15,
       "a server needs an address"},
      {"a weight of 0", "upstreams:\n  api:\n    servers: [{address: \"127.0.0.1:9001\", weight: 0}]\n" + routes_rest, 3,
       51, "expected an integer from 1 to 10000, got '0'"},
      {"hash_key without balance: hash", kUpstreams + "    hash_key: ip\n" + routes_rest, 4, 15,
       "hash_key is read with balance: hash only"},
      {"a share above 1", kUpstreams + "    eject: {max_share: 1.5}\n" + routes_rest, 4, 24,
       "invalid share '1.5' (want a number from 0 to 1, e.g. 0.5)"},
      {"retries above 5", kUpstreams + "    retries: 6\n" + routes_rest, 4, 14, "expected an integer from 0 to 5, got '6'"},
      {"an ejection shorter at its longest", kUpstreams + "    eject: {base_time: 10s, max_time: 5s}\n" + routes_rest, 4, 12,
       "eject.max_time is shorter than eject.base_time"},
      // --- routes
      {"empty routes", "upstreams:\n  api:\n    address: \"127.0.0.1:9000\"\nroutes: []\n", 4, 9, "routes must not be empty"},
      {"empty route item", kRoutesHead + "  -\n", 5, 3, "route #1 is empty (a route must be a mapping)"},
      {"empty second route item", kRoutes + "  -\n", 5, 3, "route #2 is empty (a route must be a mapping)"},
      {"unknown upstream with hint", kRoutesHead + "  - name: r\n    match:\n      path: /x\n    upstream: apx\n", 8, 15,
       "unknown upstream 'apx' (did you mean 'api'?)"},
      {"upstream given as a list", kRoutesHead + "  - name: r\n    match:\n      path: /x\n    upstream: [api]\n", 8, 15,
       "expected a single value, got a list"},
      {"missing match", kRoutesHead + "  - name: r\n    upstream: api\n", 5, 5, "route 'r' needs a match"},
      {"match without path", kRoutesHead + "  - name: r\n    match:\n      methods: [GET]\n    upstream: api\n", 7, 7,
       "match needs path or path_prefix"},
      {"both path and path_prefix",
       kRoutesHead + "  - name: r\n    match:\n      path: /x\n      path_prefix: /y\n    upstream: api\n", 8, 20,
       "match takes path or path_prefix, not both"},
      {"path without leading slash", kRoutesHead + "  - name: r\n    match:\n      path: x\n    upstream: api\n", 7, 13,
       "path must start with '/'"},
      {"path_prefix without leading slash", kRoutesHead + "  - name: r\n    match:\n      path_prefix: api/\n    upstream: api\n",
       7, 20, "path must start with '/'"},
      {"bad method", kRoutesHead + "  - name: r\n    match:\n      path: /x\n      methods: [GET, \"GE T\"]\n    upstream: api\n", 8,
       22, "invalid method 'GE T'"},
      {"route without name", kRoutesHead + "  - match:\n      path: /x\n    upstream: api\n", 5, 5, "route needs a name"},
      {"bad route name", kRoutesHead + "  - name: \"bad name\"\n    match:\n      path: /x\n    upstream: api\n", 5, 11,
       "invalid route name 'bad name' (letters, digits, - _ .)"},
      {"duplicate route names", kRoutes + "  - name: r\n    match:\n      path: /y\n    upstream: api\n", 9, 11,
       "duplicate route name 'r'"},
      // --- limits
      {"empty limit item", kLimitsHead + "      -\n", 10, 7, "limit #1 is empty (a limit must be a mapping)"},
      {"limit without name", kLimitsHead + "      - algorithm: fixed_window\n        limit: 5\n        window: 1s\n", 10, 9,
       "limit needs a name"},
      {"duplicate limit names", kLimitsHead + kLimit + kLimit, 14, 15, "duplicate limit name 'l' in route 'r'"},
      {"missing algorithm", kLimitsHead + "      - name: l\n        limit: 5\n        window: 1s\n", 10, 9,
       "limit 'l' needs an algorithm"},
      {"bad algorithm with hint", kLimitsHead + "      - name: l\n        algorithm: token_buckt\n        rate: 10/s\n", 11, 20,
       "invalid value 'token_buckt', expected one of fixed_window|sliding_log|sliding_window|token_bucket|gcra|concurrency "
       "(did you mean 'token_bucket'?)"},
      {"token_bucket without rate", kLimitsHead + "      - name: l\n        algorithm: token_bucket\n        burst: 5\n", 10, 9,
       "limit 'l': token_bucket needs rate (e.g. rate: 10/s)"},
      {"gcra with window", kLimitsHead + "      - name: l\n        algorithm: gcra\n        rate: 10/s\n        window: 1s\n", 13, 17,
       "'window' is not used by gcra (it takes rate and burst)"},
      {"fixed_window with rate", kLimitsHead + kLimit + "        rate: 10/s\n", 14, 15,
       "'rate' is not used by fixed_window (it takes limit and window)"},
      {"concurrency with rate", kLimitsHead + "      - name: l\n        algorithm: concurrency\n        limit: 5\n        rate: 1/s\n",
       13, 15, "'rate' is not used by concurrency (it takes limit and window)"},
      {"missing window", kLimitsHead + "      - name: l\n        algorithm: fixed_window\n        limit: 5\n", 10, 9,
       "limit 'l': fixed_window needs window (e.g. window: 1m)"},
      {"limit zero", kLimitsHead + "      - name: l\n        algorithm: fixed_window\n        limit: 0\n        window: 1s\n", 12, 16,
       "expected an integer from 1 to 1000000000, got '0'"},
      {"concurrency with cost", kLimitsHead + "      - name: l\n        algorithm: concurrency\n        limit: 5\n        cost: 2\n",
       13, 15, "'cost' is not used by concurrency (each request holds one lease)"},
      {"cost larger than limit", kLimitsHead + kLimit + "        cost: 6\n", 10, 9,
       "limit 'l': cost is larger than limit, so every request would be denied"},
      {"cost larger than default burst",
       kLimitsHead + "      - name: l\n        algorithm: token_bucket\n        rate: 10/s\n        cost: 11\n", 10, 9,
       "limit 'l': cost is larger than burst, so every request would be denied"},
      {"rate with unknown unit", kLimitsHead + "      - name: l\n        algorithm: gcra\n        rate: 10/x\n", 12, 15,
       "invalid rate '10/x' (want e.g. 10/s, 600/m, 1000/h)"},
      {"zero rate", kLimitsHead + "      - name: l\n        algorithm: gcra\n        rate: 0/s\n", 12, 15,
       "invalid rate '0/s' (want e.g. 10/s, 600/m, 1000/h)"},
      {"key header without a name",
       kLimitsHead + "      - name: l\n        algorithm: fixed_window\n        key: \"header:\"\n        limit: 5\n        window: 1s\n",
       12, 14, "invalid key 'header:', expected global, ip, header:<Name>, query:<name>, cookie:<name> or client_cert"},
      {"key source typo with hint",
       kLimitsHead + "      - name: l\n        algorithm: fixed_window\n        key: \"hedaer:X\"\n        limit: 5\n        window: 1s\n",
       12, 14,
       "invalid key 'hedaer:X', expected global, ip, header:<Name>, query:<name>, cookie:<name> or client_cert (did you mean 'header:'?)"},
      {"bad key in a key list",
       kLimitsHead + "      - name: l\n        algorithm: fixed_window\n        key: [ip, ipp]\n        limit: 5\n        window: 1s\n", 12,
       19, "invalid key 'ipp', expected global, ip, header:<Name>, query:<name>, cookie:<name> or client_cert (did you mean 'ip'?)"},
      {"header key with a space",
       kLimitsHead + "      - name: l\n        algorithm: fixed_window\n        key: \"header:X Y\"\n        limit: 5\n        window: 1s\n",
       12, 14, "invalid key 'header:X Y', expected global, ip, header:<Name>, query:<name>, cookie:<name> or client_cert"},
      {"empty key list",
       kLimitsHead + "      - name: l\n        algorithm: fixed_window\n        key: []\n        limit: 5\n        window: 1s\n", 12, 14,
       "key must not be empty"},
      {"bad boolean", kLimitsHead + kLimit + "        shadow: maybe\n", 14, 17, "expected true or false, got 'maybe'"},
      {"bad on_missing_key", kLimitsHead + kLimit + "        on_missing_key: ignore\n", 14, 25,
       "invalid value 'ignore', expected one of anonymous|skip"},
  };
  REQUIRE(cases.size() >= 30);

  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.what) {
      auto r = load(c.text);
      INFO("config:\n" << c.text << "errors:\n" << describe(r));
      CHECK_FALSE(r.ok());
      CHECK(r.cfg == nullptr);
      REQUIRE_FALSE(r.errors.empty());
      CHECK(r.errors[0].file == "test.yaml");
      CHECK(r.errors[0].line == c.line);
      CHECK(r.errors[0].column == c.column);
      CHECK(r.errors[0].message == c.message);
    }
  }
}

TEST_CASE("a mistake is reported once, not followed by errors it caused", "[config]") {
  SECTION("an upstream that is not a mapping is still a known name") {
    auto r = load("upstreams:\n  api: \"127.0.0.1:9000\"\n" + kRoutes.substr(kUpstreams.size()));
    INFO(describe(r));
    REQUIRE(r.errors.size() == 1);
    CHECK(r.errors[0].message == "upstream 'api' must be a mapping");
  }
  SECTION("a path that is not a string is not also 'missing a /'") {
    auto r = load(kRoutesHead + "  - name: r\n    match:\n      path: [/x]\n    upstream: api\n");
    INFO(describe(r));
    REQUIRE(r.errors.size() == 1);
    CHECK(r.errors[0].message == "expected a single value, got a list");
  }
}

TEST_CASE("a file with several errors reports all of them in line order", "[config]") {
  // The loader reads http before upstreams before routes and reports unknown keys last;
  // this file has them in the opposite order, so the output must be sorted.
  const std::string text =
      "wrkers: 2\n"                          // 1: unknown key (reported last by the loader)
      "routes:\n"                            // 2
      "  - name: r\n"                        // 3
      "    match:\n"                         // 4
      "      path: x\n"                      // 5: path must start with '/'
      "    upstream: apx\n"                  // 6: unknown upstream
      "upstreams:\n"                         // 7
      "  api:\n"                             // 8
      "    address: \"127.0.0.1\"\n"         // 9: bad address
      "http:\n"                              // 10
      "  header_timeout: 5\n"                // 11: bad duration
      "  idle_timeout: 0s\n";                // 12: zero duration
  auto r = load(text);
  INFO(describe(r));
  CHECK_FALSE(r.ok());
  CHECK(r.cfg == nullptr);
  REQUIRE(r.errors.size() == 6);
  const std::vector<std::pair<int, std::string>> want = {
      {1, "unknown key 'wrkers' (did you mean 'workers'?)"},
      {5, "path must start with '/'"},
      {6, "unknown upstream 'apx' (did you mean 'api'?)"},
      {9, "invalid upstream address '127.0.0.1' (want host:port)"},
      {11, "invalid duration '5' (want e.g. 250ms, 5s, 1m, 1h)"},
      {12, "duration must be greater than zero"},
  };
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("error " << i);
    CHECK(r.errors[i].line == want[i].first);
    CHECK(r.errors[i].message == want[i].second);
  }
  for (std::size_t i = 1; i < r.errors.size(); ++i)
    CHECK(std::pair(r.errors[i - 1].line, r.errors[i - 1].column) <= std::pair(r.errors[i].line, r.errors[i].column));
}

TEST_CASE("a file with every section loads into the structs", "[config]") {
  // Every section at once, each key with the comment a user would write beside it.
  const std::string text = R"yaml(listen: "0.0.0.0:8080"
workers: 0                         # 0 = one per core
admin:
  listen: "127.0.0.1:9901"         # /healthz /readyz /metrics /config
log:
  level: info                      # trace|debug|info|warn|error
  access_log: stdout               # stdout | off | a file path
  format: text                     # text | json
store: memory                      # memory (embedded, one instance) | redis
redis:
  mode: standalone                 # standalone | cluster | sentinel
  addresses: ["127.0.0.1:6379"]    # cluster: seed nodes; sentinel: sentinels
  master_name: mymaster            # sentinel only
  username: ""
  password: "${REDIS_PASSWORD:-}"
  database: 0
  timeout: 50ms                    # per command; then the route's on_store_error
  key_prefix: "floodgate:"
client_ip:
  trusted_proxies: ["127.0.0.1/32"]   # forwarding headers are believed only from these peers
  headers: [X-Forwarded-For, Forwarded, X-Real-IP, Proxy-Client-IP, WL-Proxy-Client-IP, HTTP_CLIENT_IP]
  ipv6_prefix: 128                 # key IPv6 clients by this prefix length (64 = per /64)
http:
  max_header_bytes: 16384          # 431 above this
  max_body_bytes: 0                # 413 above this; 0 = no limit (streamed)
  header_timeout: 10s              # 408
  idle_timeout: 60s
upstreams:
  api:
    address: "127.0.0.1:9000"
    connect_timeout: 2s
    response_timeout: 30s          # 504
    max_idle: 64
routes:                            # first match wins, in file order
  - name: hello
    match:
      path: /hello                 # exact; or path_prefix: /api/
      methods: [GET]               # optional
      host: api.example.com        # optional
    upstream: api
    on_store_error: allow          # allow (fail open) | deny (503) | local (memory store)
    response:
      status: 429
      body: '{"error":"too many requests"}'
      content_type: application/json
      headers: ietf                # ietf | legacy | both | none
    limits:
      - name: per-ip
        algorithm: sliding_log     # fixed_window | sliding_log | sliding_window |
                                   # token_bucket | gcra | concurrency
        key: ip                    # global | ip | header:<Name> | query:<name> |
                                   # cookie:<name> | a list of these (combined)
        limit: 3                   # per window; for concurrency: in flight at once
        window: 5s
        # token_bucket / gcra use  rate: 10/s  and  burst: 20  instead
        cost: 1
        shadow: false              # evaluate and count, never deny
)yaml";
  ::unsetenv("REDIS_PASSWORD");
  auto r = load(text);
  INFO(describe(r));
  REQUIRE(r.ok());
  const cfg::config& c = *r.cfg;

  CHECK(c.listen.host == "0.0.0.0");
  CHECK(c.listen.port == 8080);
  CHECK(c.workers == 0);
  REQUIRE(c.admin.listen);
  CHECK(c.admin.listen->str() == "127.0.0.1:9901");
  CHECK(c.log.level == "info");
  CHECK(c.log.access_log == "stdout");
  CHECK(c.log.format == cfg::log_format::text);
  CHECK(c.store == cfg::store_kind::memory);

  CHECK(c.redis.mode == cfg::redis_mode::standalone);
  REQUIRE(c.redis.addresses.size() == 1);
  CHECK(c.redis.addresses[0].str() == "127.0.0.1:6379");
  CHECK(c.redis.master_name == "mymaster");
  CHECK(c.redis.username.empty());
  CHECK(c.redis.password.empty());
  CHECK(c.redis.database == 0);
  CHECK(c.redis.timeout == 50ms);
  CHECK(c.redis.key_prefix == "floodgate:");

  CHECK(c.client_ip.trusted_proxies == std::vector<std::string>{"127.0.0.1/32"});
  CHECK(c.client_ip.headers == std::vector<std::string>{"X-Forwarded-For", "Forwarded", "X-Real-IP", "Proxy-Client-IP",
                                                        "WL-Proxy-Client-IP", "HTTP_CLIENT_IP"});
  CHECK(c.client_ip.ipv6_prefix == 128);

  CHECK(c.http.max_header_bytes == 16384);
  CHECK(c.http.max_body_bytes == 0);
  CHECK(c.http.header_timeout == 10s);
  CHECK(c.http.idle_timeout == 60s);
  CHECK(c.http.drain_timeout == 30s);  // default

  REQUIRE(c.upstreams.size() == 1);
  CHECK(c.upstreams[0].name == "api");
  CHECK(c.upstreams[0].servers.at(0).address.host == "127.0.0.1");
  CHECK(c.upstreams[0].servers.at(0).address.port == 9000);
  CHECK(c.upstreams[0].connect_timeout == 2s);
  CHECK(c.upstreams[0].response_timeout == 30s);
  CHECK(c.upstreams[0].max_idle == 64);
  CHECK(c.upstreams[0].idle_timeout == 60s);  // default

  REQUIRE(c.routes.size() == 1);
  const auto& rt = c.routes[0];
  CHECK(rt.name == "hello");
  CHECK(rt.match.path == "/hello");
  CHECK(rt.match.path_prefix.empty());
  CHECK(rt.match.methods == std::vector<std::string>{"GET"});
  CHECK(rt.match.host == "api.example.com");
  CHECK(rt.upstream == "api");
  CHECK(rt.upstream_index == 0);
  CHECK(rt.store_error == cfg::on_store_error::allow);
  CHECK(rt.response.status == 429);
  CHECK(rt.response.body == R"({"error":"too many requests"})");
  CHECK(rt.response.content_type == "application/json");
  CHECK(rt.response.headers == cfg::headers_mode::ietf);

  REQUIRE(rt.limits.size() == 1);
  const auto& l = rt.limits[0];
  CHECK(l.name == "per-ip");
  CHECK(l.algo == cfg::algorithm::sliding_log);
  REQUIRE(l.key.size() == 1);
  CHECK(l.key[0].type == cfg::key_source::kind::ip);
  CHECK(l.limit == 3);
  CHECK(l.window == 5s);
  CHECK(l.cost == 1);
  CHECK_FALSE(l.shadow);
  CHECK(l.missing_key == cfg::on_missing_key::anonymous);
}

TEST_CASE("values are normalised and defaults are applied", "[config]") {
  const std::string text = R"yaml(store: redis
redis:
  mode: sentinel
  addresses: "10.0.0.1:26379"
  master_name: main
http:
  max_header_bytes: 16k
  max_body_bytes: 10m
upstreams:
  api:
    address: "127.0.0.1:9000"
  auth:
    address: "[::1]:9001"
routes:
  - name: login
    match:
      path_prefix: /login/
      methods: [post, Get]
      host: Auth.Example.COM
    upstream: auth
    on_store_error: local
    response:
      headers: both
    limits:
      - name: tb
        algorithm: token_bucket
        rate: 600/m
      - name: tb-burst
        algorithm: token_bucket
        rate: 10/s
        burst: 50
        cost: 50
      - name: g
        algorithm: gcra
        rate: 1000/h
        key: [global, "header:X-Api-Key", "query:k", "cookie:session"]
        shadow: yes
        on_missing_key: skip
      - name: conc
        algorithm: concurrency
        limit: 8
      - name: conc-lease
        algorithm: concurrency
        limit: 8
        window: 2m
  - name: rest
    match:
      path: /
    upstream: api
    on_store_error: deny
)yaml";
  auto r = load(text);
  INFO(describe(r));
  REQUIRE(r.ok());
  const cfg::config& c = *r.cfg;

  CHECK(c.listen.str() == "0.0.0.0:8080");  // default
  CHECK_FALSE(c.admin.listen);               // default: no admin listener
  CHECK(c.log.level == "info");
  CHECK(c.store == cfg::store_kind::redis);
  CHECK(c.redis.mode == cfg::redis_mode::sentinel);
  REQUIRE(c.redis.addresses.size() == 1);  // a single scalar is a one-item list and replaces the default
  CHECK(c.redis.addresses[0].str() == "10.0.0.1:26379");
  CHECK(c.redis.master_name == "main");
  CHECK(c.redis.timeout == 50ms);
  CHECK(c.http.max_header_bytes == 16384);
  CHECK(c.http.max_body_bytes == 10u * 1024 * 1024);

  REQUIRE(c.upstreams.size() == 2);
  CHECK(c.upstreams[1].servers.at(0).address.host == "::1");
  CHECK(c.upstreams[1].servers.at(0).address.port == 9001);
  CHECK(c.upstreams[1].connect_timeout == 2s);  // default
  CHECK(c.upstreams[1].max_idle == 64);         // default

  REQUIRE(c.routes.size() == 2);
  const auto& login = c.routes[0];
  CHECK(login.match.path.empty());
  CHECK(login.match.path_prefix == "/login/");
  CHECK(login.match.methods == std::vector<std::string>{"POST", "GET"});
  CHECK(login.match.host == "auth.example.com");
  CHECK(login.upstream_index == 1);
  CHECK(login.store_error == cfg::on_store_error::local);
  CHECK(login.response.headers == cfg::headers_mode::both);
  CHECK(login.response.status == 429);  // default
  CHECK(login.response.content_type.empty());  // the format's (application/problem+json)
  CHECK(login.response.format == cfg::body_format::problem);
  CHECK(c.routes[1].upstream_index == 0);
  CHECK(c.routes[1].store_error == cfg::on_store_error::deny);
  CHECK(c.routes[1].limits.empty());

  REQUIRE(login.limits.size() == 5);
  const auto& tb = login.limits[0];
  CHECK(tb.algo == cfg::algorithm::token_bucket);
  CHECK(tb.rate_.count == 600);
  CHECK(tb.rate_.per == 60s);
  CHECK(tb.burst == 600);  // burst defaults to the rate's count
  REQUIRE(tb.key.size() == 1);
  CHECK(tb.key[0].type == cfg::key_source::kind::global);  // default key

  const auto& tbb = login.limits[1];
  CHECK(tbb.rate_.count == 10);
  CHECK(tbb.rate_.per == 1s);
  CHECK(tbb.burst == 50);
  CHECK(tbb.cost == 50);

  const auto& g = login.limits[2];
  CHECK(g.algo == cfg::algorithm::gcra);
  CHECK(g.rate_.count == 1000);
  CHECK(g.rate_.per == 1h);
  CHECK(g.burst == 1000);
  CHECK(g.shadow);
  CHECK(g.missing_key == cfg::on_missing_key::skip);
  REQUIRE(g.key.size() == 4);
  CHECK(g.key[0].type == cfg::key_source::kind::global);
  CHECK(g.key[1].type == cfg::key_source::kind::header);
  CHECK(g.key[1].name == "X-Api-Key");
  CHECK(g.key[2].type == cfg::key_source::kind::query);
  CHECK(g.key[2].name == "k");
  CHECK(g.key[3].type == cfg::key_source::kind::cookie);
  CHECK(g.key[3].name == "session");

  CHECK(login.limits[3].algo == cfg::algorithm::concurrency);
  CHECK(login.limits[3].limit == 8);
  CHECK(login.limits[3].window == 60s);  // default lease lifetime
  CHECK(login.limits[4].window == 2min);
}

TEST_CASE("the shipped config/floodgate.yaml loads", "[config]") {
  std::string path = FG_SOURCE_DIR;  // (appended, not `+`: GCC 12 gives a false -Warray-bounds on the latter)
  path += "/config/floodgate.yaml";
  auto r = cfg::load_file(path);
  INFO(describe(r));
  REQUIRE(r.ok());
  CHECK(r.cfg->source == path);
  CHECK(r.cfg->store == cfg::store_kind::memory);
  REQUIRE_FALSE(r.cfg->upstreams.empty());
  REQUIRE_FALSE(r.cfg->routes.empty());
  for (const auto& route : r.cfg->routes) {
    CHECK(route.upstream_index < r.cfg->upstreams.size());
    CHECK(r.cfg->upstreams[route.upstream_index].name == route.upstream);
  }
}

TEST_CASE("a missing file is one error without a position", "[config]") {
  const std::string path = "/nonexistent/floodgate-test.yaml";
  auto r = cfg::load_file(path);
  CHECK_FALSE(r.ok());
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].line == 0);
  CHECK(r.errors[0].str() == path + ": cannot open file: No such file or directory");
}

TEST_CASE("${VAR} and ${VAR:-default} are expanded from the environment, $$ is a literal $", "[config]") {
  ::setenv("FG_TEST_SECRET", "s3cr3t", 1);
  ::setenv("FG_TEST_EMPTY", "", 1);
  ::setenv("FG_TEST_WORKERS", "4", 1);
  ::unsetenv("FG_TEST_UNSET");

  SECTION("through the loader") {
    auto password_of = [](const std::string& value) -> std::optional<std::string> {
      auto r = load("redis:\n  password: '" + value + "'\n" + kRoutes);
      if (!r.ok()) return std::nullopt;
      return r.cfg->redis.password;
    };
    CHECK(password_of("${FG_TEST_SECRET}") == "s3cr3t");
    CHECK(password_of("pre-${FG_TEST_SECRET}-post") == "pre-s3cr3t-post");
    CHECK(password_of("${FG_TEST_UNSET:-fallback}") == "fallback");
    CHECK(password_of("${FG_TEST_SECRET:-fallback}") == "s3cr3t");
    CHECK(password_of("${FG_TEST_EMPTY:-fallback}") == "fallback");
    CHECK(password_of("${FG_TEST_UNSET:-}") == "");
    CHECK(password_of("a$$b") == "a$b");
    CHECK(password_of("$${FG_TEST_SECRET}") == "${FG_TEST_SECRET}");
    CHECK(password_of("cost: $5") == "cost: $5");
    CHECK(password_of("${FG_TEST_UNSET}") == std::nullopt);

    // Expansion happens before a value is interpreted, so numbers can come from the environment too.
    auto r = load("workers: ${FG_TEST_WORKERS}\n" + kRoutes);
    INFO(describe(r));
    REQUIRE(r.ok());
    CHECK(r.cfg->workers == 4);
  }

  SECTION("expand_env directly") {
    struct row {
      const char* in;
      std::optional<std::string> out;  // nullopt: an error
    };
    const row rows[] = {
        {"plain", "plain"},
        {"${FG_TEST_SECRET}", "s3cr3t"},
        {"${FG_TEST_SECRET}${FG_TEST_SECRET}", "s3cr3ts3cr3t"},
        {"${FG_TEST_UNSET:-a b}", "a b"},
        {"$$", "$"},
        {"$$$$", "$$"},
        {"$", "$"},
        {"x$", "x$"},
        {"${FG_TEST_UNSET}", std::nullopt},
        {"${FG_TEST_EMPTY}", std::nullopt},
        {"${}", std::nullopt},
        {"${:-x}", std::nullopt},
        {"${FG-TEST}", std::nullopt},
        {"${FG_TEST_SECRET", std::nullopt},
    };
    for (const auto& row : rows) {
      INFO(row.in);
      std::string out;
      auto err = cfg::expand_env(row.in, out);
      if (row.out) {
        CHECK_FALSE(err);
        CHECK(out == *row.out);
      } else {
        CHECK(err);
      }
    }
  }

  ::unsetenv("FG_TEST_SECRET");
  ::unsetenv("FG_TEST_EMPTY");
  ::unsetenv("FG_TEST_WORKERS");
}

TEST_CASE("parse_duration", "[config]") {
  const std::pair<const char*, cfg::duration> good[] = {
      {"250ms", 250ms}, {"5s", 5s},   {"1m", 1min},        {"1h", 1h},
      {"0ms", 0ms},     {"90s", 90s}, {"8784h", 8784h},  // 366 days, the largest accepted
      {"1d", 24h},      {"2w", 336h}, {"366d", 8784h},
  };
  for (const auto& [text, want] : good) {
    INFO(text);
    auto d = cfg::parse_duration(text);
    REQUIRE(d);
    CHECK(*d == want);
  }
  for (const char* text : {"", "5", "ms", "s5", "5sec", "5S", "-5s", "+5s", "5 s", " 5s", "5s ", "1.5s", "1mo", "367d", "8785h",
                           "99999999999999999999999s"}) {
    INFO(text);
    CHECK_FALSE(cfg::parse_duration(text));
  }
}

TEST_CASE("parse_rate", "[config]") {
  struct row {
    const char* text;
    std::uint64_t count;
    cfg::duration per;
  };
  const row good[] = {{"10/s", 10, 1s}, {"600/m", 600, 1min}, {"1000/h", 1000, 1h}, {"1/s", 1, 1s}};
  for (const auto& g : good) {
    INFO(g.text);
    auto r = cfg::parse_rate(g.text);
    REQUIRE(r);
    CHECK(r->count == g.count);
    CHECK(r->per == g.per);
  }
  for (const char* text : {"", "10", "10/", "/s", "0/s", "10/ms", "10/x", "10/2s", "-1/s", "10 /s", "10/ s", "1.5/s", "10/S"}) {
    INFO(text);
    CHECK_FALSE(cfg::parse_rate(text));
  }
}

TEST_CASE("parse_endpoint", "[config]") {
  struct row {
    const char* text;
    const char* host;
    std::uint16_t port;
  };
  const row good[] = {{"1.2.3.4:80", "1.2.3.4", 80},
                      {"[::1]:80", "::1", 80},
                      {"[2001:db8::1]:443", "2001:db8::1", 443},
                      {"localhost:8080", "localhost", 8080},
                      {"0.0.0.0:65535", "0.0.0.0", 65535},
                      {"h:1", "h", 1}};
  for (const auto& g : good) {
    INFO(g.text);
    auto e = cfg::parse_endpoint(g.text);
    REQUIRE(e);
    CHECK(e->host == g.host);
    CHECK(e->port == g.port);
    CHECK(e->str() == g.text);  // round-trips, with brackets for IPv6
  }
  for (const char* text : {"", "8080", ":80", "host:", "host:0", "host:65536", "host:8x", "host:-1", "::1:80", "[::1]", "[::1]80",
                           "[]:80", "[::1:80"}) {
    INFO(text);
    CHECK_FALSE(cfg::parse_endpoint(text));
  }
}

TEST_CASE("parse_size", "[config]") {
  const std::pair<const char*, std::uint64_t> good[] = {
      {"0", 0},
      {"16384", 16384},
      {"16k", 16384},
      {"16K", 16384},
      {"1m", 1048576},
      {"10M", 10485760},
      {"1g", 1073741824},
      {"1048576g", std::uint64_t{1} << 50},  // the largest accepted
  };
  for (const auto& [text, want] : good) {
    INFO(text);
    auto v = cfg::parse_size(text);
    REQUIRE(v);
    CHECK(*v == want);
  }
  for (const char* text : {"", "k", "-1", "+1", "1.5k", "16kb", "1t", "16 k", " 16", "1048577g", "99999999999999999999999"}) {
    INFO(text);
    CHECK_FALSE(cfg::parse_size(text));
  }
}

TEST_CASE("did_you_mean suggests only plausible typos", "[config]") {
  const std::vector<std::string> keys = {"listen", "workers", "admin", "log", "store", "redis", "routes", "upstreams"};
  CHECK(cfg::did_you_mean("listn", keys) == "listen");
  CHECK(cfg::did_you_mean("LISTEN", keys) == "listen");
  CHECK(cfg::did_you_mean("wokrers", keys) == "workers");  // a swap is one edit
  CHECK(cfg::did_you_mean("upstream", keys) == "upstreams");
  CHECK(cfg::did_you_mean("lgo", keys) == "log");
  CHECK(cfg::did_you_mean("foo", keys) == std::nullopt);
  CHECK(cfg::did_you_mean("timeout", keys) == std::nullopt);
  CHECK(cfg::did_you_mean("", keys) == std::nullopt);
  CHECK(cfg::did_you_mean("listn", {}) == std::nullopt);
}

TEST_CASE("diagnostic::str() is FILE:LINE:COL: message", "[config]") {
  CHECK(cfg::diagnostic{"a.yaml", 3, 7, "boom"}.str() == "a.yaml:3:7: boom");
  CHECK(cfg::diagnostic{"a.yaml", 0, 0, "cannot open file"}.str() == "a.yaml: cannot open file");

  auto r = load("listn: \"0.0.0.0:1\"\n" + kRoutes);
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].str() == "test.yaml:1:1: unknown key 'listn' (did you mean 'listen'?)");
}

TEST_CASE("an exact path and itself with a trailing slash load when the second can still match", "[config]") {
  auto route = [](const std::string& name, const std::string& match) {
    return "  - name: " + name + "\n    match: " + match + "\n    upstream: api\n";
  };
  for (const auto& routes : std::vector<std::string>{
           route("s", "{path: /x/}") + route("r", "{path: /x}"),                                   // slash first
           route("r", "{path: /x, methods: [GET]}") + route("s", "{path: /x/, methods: [POST]}"),  // other methods
           route("r", "{path: /x, methods: [GET]}") + route("s", "{path: /x/}"),                   // any method
           route("r", "{path: /x, host: a.example}") + route("s", "{path: /x/, host: b.example}"),
           route("r", "{path: /x, host: a.example}") + route("s", "{path: /x/}"),                  // any host
           route("r", "{path_prefix: /x}") + route("s", "{path: /x/}"),  // a prefix shadows as it always did
           route("r", "{path: /x, methods: [GET]}") + route("s", "{path: /x/, methods: [HEAD, POST]}"),
           route("r", "{path_prefix: /.}") + route("s", "{path_prefix: /.well-known/}"),  // "/." is no dot segment
           route("r", "{path: \"/caf%C3%A9\"}") + route("s", "{path_prefix: /a/b.c/}"),
       }) {
    auto r = load(kRoutesHead + routes);
    INFO(routes << describe(r));
    CHECK(r.ok());
  }
}

// ---------------------------------------------------------------- bounds on what a file holds

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

namespace {

bool has_error(const cfg::load_result& r, std::string_view part) {
  for (const auto& e : r.errors)
    if (e.str().find(part) != std::string::npos) return true;
  return false;
}

std::string temp_dir() {
  auto d = std::filesystem::temp_directory_path() / ("fg-config-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace

TEST_CASE("config bounds: an alias bomb is refused before it is expanded", "[config][bounds]") {
  // 200,000 references to one route: 1.2 MB of text, millions of nodes once expanded
  std::string text = kUpstreams + "x-route: &route\n  name: r\n  match: {path: /x}\n  upstream: api\nroutes:\n";
  for (int i = 0; i < 200000; ++i) text += "  - *route\n";
  auto r = load(text);
  REQUIRE_FALSE(r.ok());
  INFO(describe(r));
  CHECK(has_error(r, "expands to more than 1000000 values"));
  // refused by counting (the message is check_size's, which runs before anything is read),
  // not by doing the work

  // a billion laughs: each level doubles what the last expands to
  std::string laughs = "a0: &a0 [x, x]\n";
  for (int i = 1; i < 40; ++i)
    laughs += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [*a" + std::to_string(i - 1) + ", *a" +
              std::to_string(i - 1) + "]\n";
  CHECK(has_error(load(laughs + kRoutes), "expands to more than"));

  // nesting reached through aliases counts as written out: each level one list deeper
  std::string deep = "d0: &d0 [x]\n";
  for (int i = 1; i < 70; ++i)
    deep += "d" + std::to_string(i) + ": &d" + std::to_string(i) + " [*d" + std::to_string(i - 1) + "]\n";
  CHECK(has_error(load(deep + kRoutes), "nests deeper than 64 levels"));
  // and the same references, few and shallow, are read as written
  std::string fine = kUpstreams +
                     "routes:\n"
                     "  - {name: a, match: {path: /a}, upstream: api,\n"
                     "     limits: [&l {name: l, algorithm: fixed_window, limit: 5, window: 1s}]}\n"
                     "  - {name: b, match: {path: /b}, upstream: api, limits: [*l]}\n";
  auto ok = load(fine);
  INFO(describe(ok));
  CHECK(ok.ok());
}

TEST_CASE("config bounds: routes, limits and upstreams have caps, each named", "[config][bounds]") {
  std::string many = kRoutesHead;
  for (int i = 0; i < 10001; ++i)
    many += "  - {name: r" + std::to_string(i) + ", match: {path: /x" + std::to_string(i) + "}, upstream: api}\n";
  auto r = load(many);
  INFO(describe(r));
  CHECK(has_error(r, "at most 10000 routes, this one has 10001"));

  std::string limits = kLimitsHead;
  for (int i = 0; i < 65; ++i)
    limits += "      - {name: l" + std::to_string(i) + ", algorithm: fixed_window, limit: 5, window: 1s}\n";
  auto l = load(limits);
  INFO(describe(l));
  CHECK(has_error(l, "a route has at most 64 limits, this one has 65"));

  std::string ups = "upstreams:\n";
  for (int i = 0; i < 1001; ++i) ups += "  u" + std::to_string(i) + ": {address: \"127.0.0.1:9000\"}\n";
  CHECK(has_error(load(ups + "routes:\n" + kRoute), "at most 1000 upstreams"));

  // a thousand routes, each with its own exact path: loads (the shadowing check is not
  // quadratic) and stays a valid configuration
  std::string fine = kRoutesHead;
  for (int i = 0; i < 1000; ++i)
    fine += "  - {name: r" + std::to_string(i) + ", match: {path: /x" + std::to_string(i) + "}, upstream: api}\n";
  auto f = load(fine);
  INFO(describe(f));
  CHECK(f.ok());
}

TEST_CASE("config bounds: errors are capped, the last line says more follow", "[config][bounds]") {
  std::string text = kRoutesHead;
  for (int i = 0; i < 500; ++i) text += "  - {name: r" + std::to_string(i) + ", bogus: 1}\n";
  auto r = load(text);
  REQUIRE(r.errors.size() == 101);
  CHECK(r.errors.back().message.find("more errors follow") != std::string::npos);
}

TEST_CASE("config bounds: only a regular file of at most 4 MiB is read", "[config][bounds]") {
  const auto dir = temp_dir();
  // a FIFO with no writer: refused at once, not waited on
  const auto fifo = dir + "/fifo.yaml";
  ::unlink(fifo.c_str());
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto f = cfg::load_file(fifo);
  INFO(describe(f));
  CHECK(has_error(f, "is a FIFO, not a regular file"));
  // a symlink to /dev/zero: an endless file, refused before a byte is read
  const auto zero = dir + "/zero.yaml";
  ::unlink(zero.c_str());
  REQUIRE(::symlink("/dev/zero", zero.c_str()) == 0);
  CHECK(has_error(cfg::load_file(zero), "is a character device, not a regular file"));
  CHECK(has_error(cfg::load_file(dir), "is a directory"));
  // 64 MiB of comments: refused by its size
  const auto big = dir + "/big.yaml";
  {
    std::ofstream out(big, std::ios::binary);
    const std::string line(1023, '#');
    for (int i = 0; i < 64 * 1024; ++i) out << line << '\n';
  }
  CHECK(has_error(cfg::load_file(big), "a configuration is at most 4194304 bytes"));
  // and the same through load_string (what --check of a piped text would take)
  CHECK(has_error(load(std::string(4 * 1024 * 1024 + 1, '#')), "a configuration is at most"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("config: the admin's credential and what it guards", "[config][admin]") {
  const std::string wide = "admin:\n  listen: \"0.0.0.0:9901\"\n" + kRoutes;
  auto r = load(wide);
  INFO(describe(r));
  CHECK(has_error(r, "need a credential: set admin.token"));
  CHECK(has_error(load("admin:\n  listen: \"0.0.0.0:9901\"\n  token: short\n" + kRoutes), "use at least 16"));
  auto ok = load("admin:\n  listen: \"0.0.0.0:9901\"\n  token: 0123456789abcdef0123\n  hosts: [GW.Internal]\n"
                 "  ready_requires_store: true\n  limits_rate: 10/s\n  limits_rate_per_peer: 2/s\n" +
                 kRoutes);
  INFO(describe(ok));
  REQUIRE(ok.ok());
  CHECK(ok.cfg->admin.token == "0123456789abcdef0123");
  CHECK(ok.cfg->admin.hosts == std::vector<std::string>{"gw.internal"});
  CHECK(ok.cfg->admin.ready_requires_store);
  // loopback needs no token
  CHECK(load("admin:\n  listen: \"127.0.0.1:9901\"\n" + kRoutes).ok());
  CHECK(load("admin:\n  listen: \"[::1]:9901\"\n" + kRoutes).ok());
  CHECK(load("admin:\n  listen: \"localhost:9901\"\n" + kRoutes).ok());
}

TEST_CASE("config: redis.startup_wait and sentinel_quorum", "[config][redis]") {
  auto ok = load("store: redis\nredis:\n  addresses: [\"127.0.0.1:6379\"]\n  startup_wait: 0s\n" + kRoutes);
  INFO(describe(ok));
  REQUIRE(ok.ok());
  CHECK(ok.cfg->redis.startup_wait == 0ms);
  CHECK(load("store: redis\nredis:\n  addresses: [\"127.0.0.1:6379\"]\n" + kRoutes).cfg->redis.startup_wait == 5s);
  CHECK(has_error(load("store: redis\nredis:\n  addresses: [\"127.0.0.1:6379\"]\n  startup_wait: 11m\n" + kRoutes),
                  "at most 10m"));
  auto q = load("store: redis\nredis:\n  mode: sentinel\n  master_name: m\n  addresses: [\"127.0.0.1:26379\", "
                "\"127.0.0.1:26380\", \"127.0.0.1:26381\"]\n  sentinel_quorum: 2\n" +
                kRoutes);
  INFO(describe(q));
  REQUIRE(q.ok());
  CHECK(q.cfg->redis.sentinel_quorum == 2);
  CHECK_FALSE(load("store: redis\nredis:\n  mode: sentinel\n  master_name: m\n  addresses: [\"127.0.0.1:26379\"]\n"
                   "  sentinel_quorum: 2\n" +
                   kRoutes)
                  .ok());
}

TEST_CASE("config: an HTTP/2 upstream, its quiet streams' bound, and gRPC's denial status", "[config]") {
  const std::string up = "upstreams:\n  api:\n    address: \"127.0.0.1:9000\"\n    protocol: h2\n"
                         "    stream_idle_timeout: 10m\nroutes:\n" + kRoute + "    response:\n      grpc_status: 14\n";
  auto r = load(up);
  REQUIRE(r.ok());
  CHECK(r.cfg->upstreams[0].proto == cfg::upstream_config::protocol::h2);
  CHECK(r.cfg->upstreams[0].stream_idle_timeout == 600s);
  CHECK(r.cfg->routes[0].response.grpc_status == 14);
  auto d = load(kRoutes);
  REQUIRE(d.ok());
  CHECK(d.cfg->upstreams[0].proto == cfg::upstream_config::protocol::http1);
  CHECK(d.cfg->routes[0].response.grpc_status == 8);
  auto bad = load("upstreams:\n  api:\n    address: \"127.0.0.1:9000\"\n    protocol: h3\nroutes:\n" + kRoute);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(describe(bad), Catch::Contains("test.yaml:4:") && Catch::Contains("h2"));
  auto checked = load("upstreams:\n  api:\n    address: \"127.0.0.1:9000\"\n    protocol: h2\n    health:\n"
                      "      path: /grpc.health.v1.Health/Check\nroutes:\n" + kRoute);
  REQUIRE(checked.ok());
  auto status = load(kRoutes + "    response:\n      grpc_status: 17\n");
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(describe(status), Catch::Contains("from 1 to 16"));
}

TEST_CASE("tracing.export: the collector's URL read into host, port and path", "[config]") {
  auto load_export = [](const std::string& url) {
    return load("tracing:\n  propagate: true\n  export:\n    endpoint: " + url +
                                   "\n    queue: 100\n    batch: 10\n    interval: 200ms\n    denied_per_second: 0\n" + kRoutes);
  };
  auto r = load_export("http://collector.local:4318/v1/traces");
  REQUIRE(r.ok());
  const auto& e = r.cfg->tracing.exporter;
  CHECK(e.on());
  CHECK(e.host == "collector.local");
  CHECK(e.port == 4318);
  CHECK(e.target == "/v1/traces");
  CHECK(e.queue == 100);
  CHECK(e.batch == 10);
  CHECK(e.interval == std::chrono::milliseconds(200));
  CHECK(e.denied_per_second == 0);
  CHECK(e.service_name == "floodgate");
  auto v6 = load_export("http://[::1]:9000");
  REQUIRE(v6.ok());
  CHECK(v6.cfg->tracing.exporter.host == "::1");
  CHECK(v6.cfg->tracing.exporter.port == 9000);
  CHECK(v6.cfg->tracing.exporter.target == "/v1/traces");
  auto no_port = load_export("http://c/otlp/v1/traces");
  REQUIRE(no_port.ok());
  CHECK(no_port.cfg->tracing.exporter.port == 80);
  CHECK(no_port.cfg->tracing.exporter.target == "/otlp/v1/traces");
  for (const char* bad : {"http://:80/x", "http://c:0", "http://c:70000", "http://a b:1", "http://u@c:1", "ftp://c:1",
                          "http://[::1:1", "http://c:1/a b", "http://c:1/#f"})
    CHECK_FALSE(load_export(bad).ok());
}
