// http::detail::exchange as a unit, driven through its downstream interface by a fake
// downstream (what an HTTP/2 stream will be): the request head given as parsed fields,
// its body handed over in pieces the test chooses, the answer recorded as the head's
// status and fields and the body's bytes, with no HTTP/1.1 framing anywhere on that
// side. The upstream is the scripted one of session_rig.hpp, on a loopback socket; the
// decision source is fake.
#include <catch2/catch.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/beast/http/empty_body.hpp>

#include <deque>
#include <string>
#include <tuple>
#include <vector>

#include "http/exchange_limits.ipp"
#include "http/exchange_upstream.ipp"
#include "session_rig.hpp"

namespace {

using namespace fg::test::rigs;
using fg::http::detail::outcome;
using error_code = boost::system::error_code;

// A downstream with no framing of its own: what the exchange asks of a connection.
struct fake_down {
  fg::http::worker_context& ctx;
  bhttp::request<bhttp::empty_body> req;
  fg::deadline::board::watch entry;
  fg::net::address addr = fg::net::normalize(asio::ip::make_address("192.0.2.9"));
  std::string addr_text = addr.to_string();
  std::deque<std::string> body;   // the request body's pieces, handed over one a read
  error_code body_error;          // what a read answers once `body` is empty (none: the body ends)
  bool continued = false;         // "go on" was asked for
  std::vector<std::chrono::milliseconds> turns;  // waits for a turn (on_exceed: delay)

  // What the exchange answered.
  unsigned status = 0;            // a relayed response's status, or a local answer's
  bool local = false;             // the answer was the exchange's own
  std::string extra;              // the rate-limit fields given with it
  std::string received;           // the body's bytes
  bool last_seen = false;         // the piece marked last came
  int writes = 0;

  static constexpr std::string_view scheme = "https";
  std::string_view protocol() const { return "HTTP/2"; }

  fake_down(fg::http::worker_context& c, bhttp::verb method, std::string target)
      : ctx(c), entry(c.deadlines.open(nullptr)) {
    req.method(method);
    req.target(target);
    req.version(11);
    req.set(bhttp::field::host, "x");
  }

  const bhttp::request_header<>& request() const { return req.base(); }
  bool keep_alive() const { return true; }
  bool body_done() const { return body.empty() && !body_error; }
  fg::deadline::entry& watch() { return *entry; }
  const fg::net::address& peer() const { return addr; }
  std::string_view peer_str() const { return addr_text; }
  std::string_view client_cert() const { return {}; }

  asio::awaitable<bool> send_continue() {
    continued = true;
    co_return true;
  }
  bool start_body(bool) { return true; }
  asio::awaitable<error_code> read_body(char* data, std::size_t size, std::size_t& produced) {
    produced = 0;
    if (body.empty()) co_return body_error;
    auto& piece = body.front();
    produced = std::min(size, piece.size());
    std::copy_n(piece.data(), produced, data);
    piece.erase(0, produced);
    if (piece.empty()) body.pop_front();
    co_return error_code{};
  }
  asio::awaitable<outcome> send_local(unsigned st, bool keep_alive, std::string_view b, std::string_view x,
                                      std::string_view) {
    status = st;
    local = true;
    received = b;
    extra = x;
    co_return keep_alive ? outcome::keep_going : outcome::close;
  }
  bool begin_response(fg::http::response_parser& rp, std::string_view x, bool may_keep_alive,
                      fg::http::detail::response_start& out) {
    status = rp.get().result_int();
    extra = x;
    out.body_expected = status != 204 && status != 304 && req.method() != bhttp::verb::head;
    out.up_close_delimited = !rp.chunked() && !rp.content_length();
    out.keep_alive = may_keep_alive;
    return true;
  }
  char* inline_room(std::size_t) { return nullptr; }  // every body through the exchange's block
  std::span<const asio::const_buffer> response_piece(bool, const char* data, std::size_t n, bool last) {
    received.append(data, n);
    last_seen = last_seen || last;
    bufs[0] = asio::buffer(data, n ? n : 1);  // (a write of the head alone is a write too)
    return {bufs.data(), 1};
  }
  asio::awaitable<std::tuple<error_code, std::size_t>> write(std::span<const asio::const_buffer> b) {
    ++writes;
    co_return std::tuple{error_code{}, asio::buffer_size(b)};
  }
  bool client_leaves_while_waiting = false;
  asio::awaitable<bool> wait_turn(std::chrono::milliseconds wait) {
    turns.push_back(wait);
    co_return client_leaves_while_waiting;
  }
  bool client_gone() const { return false; }
  void set_trailers(std::span<const std::pair<std::string, std::string>>) {}
  void stream_idle(std::chrono::milliseconds) {}
  asio::awaitable<bool> upgrade(fg::upstream::connection&, fg::http::response_parser&, std::string_view,
                                std::function<void()>, std::chrono::milliseconds, fg::http::tunnel_stats&) {
    co_return false;
  }

  std::array<asio::const_buffer, 1> bufs;
};

using exchange = fg::http::detail::exchange<fake_down>;

// One request through the exchange, as a connection serves it.
asio::awaitable<void> serve(exchange& ex, outcome& out, bool& done) {
  ex.use_current();
  {
    auto request = ex.begin();
    auto st = ex.decide(request.source());
    if (st == fg::limit::status::pending) {
      auto [ec] = co_await ex.wait(request.source());
      st = ex.decided(request.source(), ec);
    }
    out = co_await ex.respond(st);
  }
  done = true;
}

outcome run(rig& r, exchange& ex) {
  outcome out = outcome::closed;
  bool done = false;
  asio::co_spawn(r.ioc, serve(ex, out, done), rethrow);
  r.run_until([&] { return done; }, "the exchange to end");
  // What the request held went back when its scope ended, not with the exchange.
  CHECK(r.limits.requests == 0);
  CHECK(r.source.releases == r.source.holds);
  return out;
}

}  // namespace

TEST_CASE("exchange: a request goes upstream and its answer comes down through the downstream", "[exchange]") {
  rig r;
  fake_down d(r.ctx, bhttp::verb::get, "/a?x=1");
  {
    exchange ex(r.ctx, d);
    CHECK(run(r, ex) == outcome::keep_going);
  }
  CHECK(d.status == 200);
  CHECK_FALSE(d.local);
  CHECK(d.received == "/a?x=1");
  CHECK(d.last_seen);
  REQUIRE(r.seen.size() == 1);
  // What the upstream is told comes from the downstream: its peer, its scheme.
  CHECK(r.seen[0]["X-Forwarded-For"] == "192.0.2.9");
  CHECK(r.seen[0]["X-Forwarded-Proto"] == "https");
  CHECK(r.source.holds == 1);
  r.check_released();
}

TEST_CASE("exchange: a request body handed over in pieces reaches the upstream whole, in either framing",
          "[exchange]") {
  const bool chunked = GENERATE(false, true);
  rig r;
  r.answer = [](const auto& req) { return ok(req.body()); };
  fake_down d(r.ctx, bhttp::verb::post, "/up");
  d.body = {"hel", "lo, ", std::string(40000, 'w')};  // (more than one body block)
  const auto total = 3 + 4 + 40000;
  if (chunked) d.req.set(bhttp::field::transfer_encoding, "chunked");
  else d.req.set(bhttp::field::content_length, std::to_string(total));
  d.req.set(bhttp::field::expect, "100-continue");
  {
    exchange ex(r.ctx, d);
    CHECK(run(r, ex) == outcome::keep_going);
  }
  CHECK(d.continued);
  REQUIRE(r.seen.size() == 1);
  CHECK(r.seen[0].body() == "hello, " + std::string(40000, 'w'));
  CHECK(r.seen[0].chunked() == chunked);
  CHECK(r.seen[0].count(bhttp::field::expect) == 0);
  CHECK(d.status == 200);
  CHECK(d.received.size() == static_cast<std::size_t>(total));
  r.check_released();
}

TEST_CASE("exchange: each failure of the downstream's body or of the upstream gets its answer", "[exchange]") {
  struct row {
    const char* name;
    std::deque<std::string> body;
    error_code body_error;
    unsigned status;
    reply upstream = {};
    int connects = 1;       // connections the upstream accepted
    std::size_t reads = 0;  // requests it read whole
    std::string extra = {};
    std::vector<std::string> deny = {};
  };
  const std::vector<row> rows = {
      {"the client is silent before the first piece", {}, boost::beast::error::timeout, 408, {}, 0},
      {"the client sends what is no body", {}, boost::beast::http::error::bad_chunk, 400, {}, 0},
      {"the client stops mid-body", {"abc"}, boost::beast::error::timeout, 408, {"", false, true}},
      {"a body over max_body_bytes", {"0123456789"}, {}, 413, {}, 0, 0, "http:\n  max_body_bytes: 4\n"},
      {"a limit denies", {"abc"}, {}, 429, {}, 0, 0, {}, {"gate"}},
      {"upstream closes before answering", {"abc"}, {}, 502, {"", true}, 1, 1},
  };
  for (const auto& row : rows) {
    SECTION(row.name) {
      rig r(row.extra);
      r.answer = [&](const auto&) { return row.upstream; };
      r.source.deny = row.deny;
      fake_down d(r.ctx, bhttp::verb::post, "/p");
      d.req.set(bhttp::field::transfer_encoding, "chunked");
      d.body = row.body;
      d.body_error = row.body_error;
      {
        exchange ex(r.ctx, d);
        run(r, ex);
      }
      CHECK(d.status == row.status);
      CHECK(d.local);
      if (row.status == 429) CHECK(d.received.find("gate") != std::string::npos);  // (the problem's body)
      r.run_until([&] { return r.accepted == row.connects; }, "the upstream's connections");
      r.ioc.poll();
      CHECK(r.seen.size() == row.reads);
      r.check_released();
    }
  }
}

TEST_CASE("exchange: a delayed request waits its turn through the downstream, then goes, and not if its client left",
          "[exchange]") {
  const bool gone = GENERATE(false, true);
  rig r;
  // A limit that admits a request later (on_exceed: delay), its decision's wait 250 ms.
  auto cfg = fg::test::load("upstreams:\n  api:\n    address: \"127.0.0.1:" +
                            std::to_string(r.upstream.local_endpoint().port()) +
                            "\"\nroutes:\n  - name: all\n    match:\n      path_prefix: /\n    upstream: api\n"
                            "    limits:\n      - {name: gate, algorithm: gcra, key: ip, rate: 10/s, "
                            "on_exceed: delay, max_delay: 1s}\n");
  r.ctx.rt = fg::http::compiled_config::build(cfg);
  r.pool.configure(cfg->upstreams);
  r.source.delay_ms = 250;
  fake_down d(r.ctx, bhttp::verb::get, "/slow");
  d.client_leaves_while_waiting = gone;
  {
    exchange ex(r.ctx, d);
    CHECK(run(r, ex) == (gone ? outcome::closed : outcome::keep_going));
  }
  REQUIRE(d.turns.size() == 1);
  CHECK(d.turns[0] == std::chrono::milliseconds(250));
  CHECK(d.status == (gone ? 0u : 200u));
  CHECK(r.seen.size() == (gone ? 0u : 1u));
  CHECK(r.ctx.delayed == 0);
  r.check_released();
}
