#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fg::config {

using duration = std::chrono::milliseconds;

struct endpoint {
  std::string host;
  std::uint16_t port = 0;
  std::string str() const;
  bool operator==(const endpoint&) const = default;
};

struct rate {
  std::uint64_t count = 0;
  duration per{1000};
};

struct admin_config {
  std::optional<endpoint> listen;  // absent = no admin listener
  // Bearer credential for /config, /limits and POST /reload ("" = none: only allowed
  // when the listener is on a loopback address).
  std::string token;
  // Names a request's Host may carry besides IP literals and "localhost" (DNS rebinding).
  std::vector<std::string> hosts;
  // /readyz fails on a store outage even where every route may allow or go local.
  bool ready_requires_store = false;
  // /limits: calls admitted per period, in total and per peer address.
  rate limits_rate{20, duration{1000}};
  rate limits_rate_per_peer{5, duration{1000}};
};

// 127.0.0.0/8, ::1 or "localhost": reachable from this machine only.
bool is_loopback(const endpoint& ep);

enum class log_format { text, json };

struct log_config {
  std::string level = "info";
  std::string access_log = "stdout";  // stdout | off | path
  log_format format = log_format::text;
  bool operator==(const log_config&) const = default;
};

enum class store_kind { memory, redis };
enum class redis_mode { standalone, cluster, sentinel };

struct redis_config {
  redis_mode mode = redis_mode::standalone;
  std::vector<endpoint> addresses{{"127.0.0.1", 6379}};
  std::string master_name;
  std::string username;
  std::string password;
  // Sentinel mode: the sentinels' own credentials (they may differ from the master's).
  std::string sentinel_username;
  std::string sentinel_password;
  int database = 0;
  duration timeout{50};
  std::string key_prefix = "floodgate:";
  // At the start, the proxy port opens once every worker's store is ready, or after this.
  duration startup_wait{5000};
  // Sentinel mode: how many of the sentinels asked must name the same master (0: every
  // sentinel that answers must name it).
  unsigned sentinel_quorum = 0;
  // An idle connection is checked this often (PING; a subscriber subscribes again).
  duration ping_interval{1000};
  // A connection awaiting a reply with no byte from the server for this long, or a
  // connect not done in it, is closed and made again; 0: derived (effective_stall_timeout).
  duration stall_timeout{0};
  bool operator==(const redis_config&) const = default;
};

// redis.stall_timeout as set, or max(1s, 5 x redis.timeout): a few timeouts, and never so
// short that a Redis pausing for a fork or a slow script is dropped by every gateway.
inline duration effective_stall_timeout(const redis_config& c) {
  if (c.stall_timeout.count() > 0) return c.stall_timeout;
  return std::max(duration{1000}, c.timeout * 5);
}

struct memory_config {
  std::size_t max_keys = 1'000'000;  // the memory store's cap (least recently used evicted past it)
};

struct client_ip_config {
  std::vector<std::string> trusted_proxies;  // CIDRs, validated by the loader
  std::vector<std::string> headers{"X-Forwarded-For", "Forwarded", "X-Real-IP",
                                   "Proxy-Client-IP", "WL-Proxy-Client-IP", "HTTP_CLIENT_IP"};
  int ipv6_prefix = 128;
  // The header that tells the upstream the resolved client ("" = none).
  std::string forward = "X-Real-IP";
  // X-Forwarded-For / Forwarded sent upstream: starting at the resolved client
  // (from_client), or the whole chain the trusted proxy sent (full).
  enum class chain { from_client, full } forward_chain = chain::from_client;
};

struct http_config {
  std::size_t max_header_bytes = 16384;
  std::uint64_t max_body_bytes = 0;  // 0 = unlimited
  duration header_timeout{10'000};
  duration idle_timeout{60'000};
  duration drain_timeout{30'000};
  // Requests waiting for their turn (on_exceed: delay) per worker; past it, 429.
  std::size_t max_delayed = 1024;
  // Open downstream connections per process; 0 = sized from the descriptor limit.
  std::size_t max_connections = 0;
};

// HTTP/2 to clients: by ALPN on the TLS listener, with prior knowledge on the plain one.
struct http2_config {
  bool tls = true;         // the TLS listener offers h2 (then http/1.1) by ALPN
  bool cleartext = false;  // the plain listener takes HTTP/2 with prior knowledge (the preface)
  unsigned max_concurrent_streams = 100;  // per connection; a stream beyond is refused
  bool operator==(const http2_config&) const = default;
};

// W3C Trace Context (traceparent, tracestate) for the upstream: off unless `propagate`.
// tracing.export: spans sent over OTLP/HTTP (JSON) to a collector.
struct span_export_config {
  // The collector's endpoint, http://host:port/path (empty: no export).
  std::string host;
  std::uint16_t port = 0;
  std::string target;
  std::string service_name = "floodgate";
  // A denied request's span is sent whatever its sampled flag, this many a second at
  // most (0: none): a flood of denials costs no more than that in exports.
  std::size_t denied_per_second = 100;
  std::size_t queue = 2048;  // spans waiting to be sent at most (past it, dropped and counted)
  std::size_t batch = 512;   // spans in one export at most
  duration interval{1000};   // an export at least this often while spans wait
  duration timeout{2000};    // one export's connect, send and answer
  bool on() const { return !host.empty(); }
  bool operator==(const span_export_config&) const = default;
};

struct tracing_config {
  bool propagate = false;  // each request goes upstream with a traceparent of the gateway's span
  // Whose traceparent (and tracestate) is continued; any other's is replaced by a new trace.
  enum class trust { trusted_proxies, always, never };
  trust trust_incoming = trust::trusted_proxies;
  double sample_ratio = 0.01;  // a new trace's share sampled (the flag the upstream reads)
  span_export_config exporter;  // (tracing.export)
  bool operator==(const tracing_config&) const = default;
};

// A certificate chain and its private key, PEM files (`where`: the line of the entry,
// "file:line", for the errors found when they are read).
struct tls_certificate {
  std::string cert;
  std::string key;
  std::string where;
  bool operator==(const tls_certificate&) const = default;
};

// Mozilla's "intermediate" TLS 1.2 suites (forward secret, AEAD); TLS 1.3's are
// OpenSSL's own.
inline constexpr const char* intermediate_ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

// A second listener that terminates TLS (1.2 and 1.3, ALPN h2 and http/1.1), its certificate
// chosen by SNI among `certificates` (the first: the default).
struct tls_config {
  std::optional<endpoint> listen;  // absent: no TLS listener
  std::vector<tls_certificate> certificates;
  std::string ciphers = intermediate_ciphers;
  duration handshake_timeout{10'000};
  unsigned max_handshakes = 1024;  // in progress at once, per worker
  // Client certificates (mTLS): verified against this PEM bundle ("" = none asked for);
  // without one, a client is refused unless `clients_optional`.
  std::string client_ca;
  bool clients_optional = false;
  bool operator==(const tls_config&) const = default;
};

enum class algorithm { fixed_window, sliding_log, sliding_window, token_bucket, gcra, concurrency };
enum class on_store_error { allow, deny, local };
enum class headers_mode { ietf, legacy, both, none };
enum class on_missing_key { anonymous, skip };

struct key_source {
  // client_cert: the subject of the client's verified TLS certificate (tls.client_ca).
  enum class kind { global, ip, header, query, cookie, client_cert } type = kind::global;
  std::string name;  // header / query / cookie name
  bool operator==(const key_source&) const = default;
};

enum class balance { round_robin, least_conn, hash };

struct upstream_server {
  endpoint address;
  unsigned weight = 1;
  // Set when the configured address was a name: that name and port ("api.internal:9000"),
  // of which `address` is one resolved address.
  std::string name;
  bool operator==(const upstream_server&) const = default;
};

// Passive health: a server that fails `failures` times in a row (connect failures,
// resets and timeouts before a response, and the listed statuses) is not chosen for
// base_time, doubled at each ejection that follows without a success in between, up
// to max_time; never more than max_share of an upstream's servers at once.
struct eject_config {
  unsigned failures = 5;  // 0: never ejected
  duration base_time{10'000};
  duration max_time{300'000};
  double max_share = 0.5;
  std::vector<unsigned> statuses;  // responses that count as failures (e.g. 502, 503, 504)
  bool operator==(const eject_config&) const = default;
};

// Retries on another server take at most this share of the upstream's requests in
// flight (Envoy's retry budget), and `min` are always allowed.
struct retry_budget {
  double share = 0.2;
  unsigned min = 3;
  bool operator==(const retry_budget&) const = default;
};

// Active health (optional): one GET of `path` to each server every `interval`, from one
// place per process; `fall` failures in a row take a server out of service until `rise`
// passes in a row bring it back. A pass is a status in `statuses` (2xx and 3xx when
// empty) within `timeout`.
struct health_check_config {
  bool enabled = false;
  std::string path = "/";
  std::string host;  // the Host of the check ("" = the server's address)
  duration interval{5'000};
  duration timeout{1'000};
  unsigned rise = 2;
  unsigned fall = 3;
  std::vector<unsigned> statuses;
  bool operator==(const health_check_config&) const = default;
};

// How the names of upstream servers are resolved, each of a name's addresses a server
// of its own: asked again every `refresh` on a thread of the gateway's own (never on a
// request's path), and a name that fails keeps its last good addresses.
struct resolver_config {
  std::vector<endpoint> servers;  // name servers (IP:port); empty: /etc/resolv.conf's, after /etc/hosts
  duration timeout{2'000};        // one try of one name server
  unsigned tries = 2;
  duration refresh{30'000};
  bool operator==(const resolver_config&) const = default;
};

// TLS to an upstream's servers: each server's certificate verified (against `ca`, else
// the system's store) unless `verify` is false; `server_name`, else the server's host
// name, sent as SNI and checked against the certificate; a client certificate if given.
struct upstream_tls_config {
  bool enabled = false;
  bool verify = true;
  std::string ca;           // a PEM bundle ("" = the system's store)
  std::string server_name;  // "" = the name the server's address came from, else the address
  std::string client_cert;  // PEM chain and key, both or neither
  std::string client_key;
  std::string where;  // "file:line" of the tls: mapping, for the errors found when the files are read
  bool operator==(const upstream_tls_config&) const = default;
};

struct upstream_config {
  std::string name;
  // `address:` is the one-server form of `servers:` (weight 1).
  std::vector<upstream_server> servers;
  config::balance balance = balance::round_robin;
  key_source hash_key{key_source::kind::ip, {}};  // balance: hash
  eject_config eject;
  health_check_config health;
  // Tries on another server after a connect failure (any request) or a reset before
  // any response byte (idempotent requests without a body).
  unsigned retries = 1;
  retry_budget budget;
  duration connect_timeout{2'000};
  duration response_timeout{30'000};
  // One try's time, from its connect to the response head (0: none, response_timeout
  // per read only). A try past it fails as a timeout and, for a request that may go
  // again, goes to another server (Envoy's per_try_timeout).
  duration try_timeout{0};
  std::size_t max_idle = 64;  // per server
  // An idle pooled connection is closed after this (nginx's upstream keepalive_timeout):
  // set below the servers' own, so that they never close one as it is reused.
  duration idle_timeout{60'000};
  upstream_tls_config tls;
  // The protocol its servers speak: HTTP/1.1 (a request per pooled connection at a time),
  // or HTTP/2 (`h2`: prior knowledge in cleartext, ALPN h2 over `tls:`), a worker's
  // connection to a server carrying many requests at once (gRPC needs it).
  enum class protocol { http1, h2 } proto = protocol::http1;
  // h2: a stream quiet both ways this long is ended (its response head is bounded by
  // response_timeout; a gRPC stream's later messages may be minutes apart).
  duration stream_idle_timeout{300'000};
};

// How a limit with plans picks one per request: by a plan name the request carries
// (`from`), or by its consumer's key looked up in a file of SHA-256 digests (`consumers`).
struct plan_choice {
  enum class by { none, source, consumers } how = by::none;
  key_source from;           // by source
  std::string consumers;     // by consumers: the file (a relative path is the configuration's folder's)
  key_source consumer_key;   // by consumers: whose value's SHA-256 is looked up
  bool reject_unknown = false;  // a consumer the file does not know (or without a key): 401/403
  std::size_t default_plan = 0; // the plan of the unknown (an index in limit_config::plans)
  bool operator==(const plan_choice&) const = default;
};

struct limit_config {
  std::string name;
  // Where its counters are (obs::metrics_layout: stable across reloads; the loader
  // numbers limits in file order).
  std::size_t index = 0;
  algorithm algo = algorithm::fixed_window;
  std::vector<key_source> key{{key_source::kind::global, {}}};
  std::uint64_t limit = 0;
  duration window{0};
  rate rate_;
  std::uint64_t burst = 0;
  std::uint64_t cost = 1;
  // Where a request's cost comes from: `cost` (fixed), a request header (a whole number,
  // 0 to 1e9; 0: the limit is not checked), or the request body's size in bytes (its
  // Content-Length; a chunked one: 1 up front, the rest charged once it has been read).
  enum class cost_kind { fixed, header, body_bytes } cost_from = cost_kind::fixed;
  std::string cost_header;
  // A response header whose number is charged to the key after the response (a
  // post-charge: the balance may go past the limit); "" = none.
  std::string charge_header;
  // on_exceed: delay (gcra, token_bucket): a request over the limit that would be
  // admitted within max_delay is admitted now and waits for its turn before it goes
  // upstream (nginx's limit_req burst/delay); beyond it, the route's 429.
  duration max_delay{0};  // 0: on_exceed: reject
  bool shadow = false;
  config::on_missing_key missing_key = on_missing_key::anonymous;
  // align: calendar (fixed_window): the window is the calendar day, week (from Monday) or
  // month in `timezone` (an IANA name), ending at its midnight there; `window` is then
  // its nominal length (1d, 1w, 30 days for 1mo), for the rate headers' w=.
  enum class period { none, day, week, month } calendar = period::none;
  std::string timezone = "UTC";
  // Plans: the numbers above chosen per request. Each plan is a copy of this limit with
  // its own numbers, its name in `plan` ("" for a limit without plans), unlimited ones
  // not checked at all. The keys are the limit's whatever the plan, so a consumer moved
  // to another plan keeps its counter.
  plan_choice choice;
  std::vector<limit_config> plans;
  std::string plan;
  bool unlimited = false;
  // This limit's RateLimit-Policy item (rate_policy_item with its quota), written by the
  // loader once the numbers above are final, so that a response copies it instead of
  // formatting it; "" in a limit made by hand (it is then formatted per response).
  std::string rate_policy;
};

// token_bucket and gcra take rate + burst; the others limit + window.
inline bool rate_based(const limit_config& l) {
  return l.algo == algorithm::token_bucket || l.algo == algorithm::gcra;
}
// The quota a limit's decisions report: its burst if rate-based, else its limit.
inline std::uint64_t quota(const limit_config& l) { return rate_based(l) ? l.burst : l.limit; }
// The limit's item in a RateLimit-Policy field (the IETF rate-limit headers draft) with
// quota `q`: "name";q=100;w=60, then ;qu="content-bytes" for an upload quota and
// ;plan="gold" for a plan. w is the window in whole seconds, rounded up (a rate-based
// limit's: the time its burst takes to refill).
std::string rate_policy_item(const limit_config& l, std::uint64_t q);
// Milliseconds as whole seconds, rounded up (0 for none or less).
std::int64_t ceil_seconds(std::int64_t ms);
// sliding_log and concurrency name their Redis entries after the request (its nonce).
inline bool names_entries(const limit_config& l) {
  return l.algo == algorithm::sliding_log || l.algo == algorithm::concurrency;
}
// A cost that is not known up front (a request header's, a body's, a response's): the
// algorithms whose counters a cost can be added to after the fact (not sliding_log,
// whose entries are one per unit, nor concurrency).
inline bool takes_any_cost(const limit_config& l) {
  return l.algo == algorithm::fixed_window || l.algo == algorithm::sliding_window ||
         l.algo == algorithm::token_bucket || l.algo == algorithm::gcra;
}
// A denial by this limit holds until its retry time, so a worker may repeat it without
// asking the store: not for shadow limits (never enforced) nor concurrency (a lease
// may come back any moment).
inline bool denials_hold(const limit_config& l) { return !l.shadow && l.algo != algorithm::concurrency; }

struct route_match {
  std::string path;         // exact, or
  std::string path_prefix;  // prefix
  std::vector<std::string> methods;  // upper case; empty = any
  std::string host;                  // lower case; empty = any
};

// A denial's body: RFC 9457 problem details (the IETF rate-limit draft's quota-exceeded
// type), a line of text, or the route's own template (`body`).
enum class body_format { problem, text, custom };

struct response_config {
  unsigned status = 429;
  // A gRPC request's denial (its content-type application/grpc*): HTTP 200 with this
  // grpc-status (8: RESOURCE_EXHAUSTED; e.g. 14: UNAVAILABLE, which clients retry).
  unsigned grpc_status = 8;
  body_format format = body_format::problem;
  // custom: the body, with {limit} {retry_after} {plan} {route} {status} filled in.
  std::string body;
  std::string content_type;  // "" = the format's (application/problem+json, text/plain)
  headers_mode headers = headers_mode::ietf;
};

struct route_config {
  std::string name;
  route_match match;
  std::string upstream;
  std::size_t upstream_index = 0;
  std::size_t slot = 0;  // where its counters are (obs::metrics_layout; the loader: its position)
  config::on_store_error store_error = on_store_error::allow;
  response_config response;
  std::vector<limit_config> limits;
};

struct config {
  std::string source;  // file it was loaded from
  std::string hash;    // of the file's text (FNV-1a, 16 hex digits): which config is loaded
  endpoint listen{"0.0.0.0", 8080};
  unsigned workers = 0;  // 0 = one per core
  admin_config admin;
  log_config log;
  store_kind store = store_kind::memory;
  memory_config memory;
  redis_config redis;
  client_ip_config client_ip;
  http_config http;
  http2_config http2;
  tracing_config tracing;
  tls_config tls;
  resolver_config resolver;
  std::vector<upstream_config> upstreams;
  std::vector<route_config> routes;
};

using snapshot = std::shared_ptr<const config>;

}  // namespace fg::config
