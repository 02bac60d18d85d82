#include "upstream/health_checker.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "obs/logging.hpp"
#include "upstream/connection.hpp"
#include "upstream/h2_session.hpp"
#include "util/asio.hpp"

namespace fg::upstream {

using asio::ip::tcp;
using util::use_tuple;

struct health_checker::state {
  asio::io_context ioc{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  // Bumped by each update (on the checker's thread): a check loop of an older set ends.
  std::uint64_t generation = 0;
  std::size_t in_flight = 0;
  bool stopping = false;
};

bool check_passes(const config::health_check_config& h, unsigned status) {
  if (h.statuses.empty()) return status >= 200 && status < 400;
  return std::find(h.statuses.begin(), h.statuses.end(), status) != h.statuses.end();
}

namespace {

std::string words(check_result r) {
  switch (r.why) {
    case failure_kind::connect: return "connect failed";
    case failure_kind::timeout: return "no answer in time";
    case failure_kind::reset: return "closed without an answer";
    case failure_kind::status: return "status " + std::to_string(r.status);
    case failure_kind::none: break;
  }
  return "passed";
}

// gRPC's health protocol (grpc.health.v1.Health/Check): an empty HealthCheckRequest (the
// server's overall health), and the answer SERVING (field 1, varint 1) with grpc-status 0.
constexpr std::string_view grpc_health_path = "/grpc.health.v1.Health/Check";
constexpr char grpc_empty_message[] = {0, 0, 0, 0, 0};
constexpr char grpc_serving[] = {0, 0, 0, 0, 2, 0x08, 0x01};

// A check of an HTTP/2 server on the connection made: a GET of health.path, or gRPC's
// health check when the path is grpc.health.v1's.
asio::awaitable<check_result> exchange_h2(const upstream_servers& u, const std::string& host, connection& c) {
  const auto& h = u.health;
  const bool grpc = h.path == grpc_health_path;
  auto conn = std::make_unique<connection>(c.get_executor());
  conn->socket = std::move(c.socket);
  conn->tls = std::move(c.tls);
  if (conn->tls) {
    const unsigned char* p = nullptr;
    unsigned n = 0;
    SSL_get0_alpn_selected(conn->tls.native_handle(), &p, &n);
    if (n != 2 || p[0] != 'h' || p[1] != '2') co_return check_result{failure_kind::connect};
  }
  auto session = std::make_shared<h2_session>(std::move(conn));
  session->start();
  struct closer {
    std::shared_ptr<h2_session>& s;
    ~closer() { s->close(); }
  } close_after{session};
  auto nv = [](std::string_view n, std::string_view v) {
    return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(n.data())),
                      reinterpret_cast<std::uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
                      NGHTTP2_NV_FLAG_NONE};
  };
  const std::vector<nghttp2_nv> fields =
      grpc ? std::vector{nv(":method", "POST"), nv(":scheme", u.tls ? "https" : "http"), nv(":authority", host),
                         nv(":path", h.path), nv("content-type", "application/grpc"), nv("te", "trailers"),
                         nv("user-agent", "floodgate-health-check")}
           : std::vector{nv(":method", "GET"), nv(":scheme", u.tls ? "https" : "http"), nv(":authority", host),
                         nv(":path", h.path), nv("user-agent", "floodgate-health-check")};
  deadline::entry watch;  // (unarmed: health.timeout bounds the whole check)
  h2_call call;
  if (!call.start(session, fields, grpc, watch, watch)) co_return check_result{failure_kind::reset};
  if (grpc && co_await call.send(grpc_empty_message, sizeof grpc_empty_message, true))
    co_return check_result{failure_kind::reset};
  if (co_await call.head()) co_return check_result{failure_kind::reset};
  const auto status = call.status();
  if (!grpc) co_return check_result{check_passes(h, status) ? failure_kind::none : failure_kind::status, status};
  // The answer's message (a few bytes) and its trailers.
  std::string body;
  char buf[64];
  for (std::size_t n = 0; !call.done() && body.size() < 1024;) {
    if (co_await call.read(buf, sizeof buf, n)) co_return check_result{failure_kind::reset};
    body.append(buf, n);
  }
  std::string_view grpc_status;
  for (const auto& f : call.trailers().empty() ? call.fields() : call.trailers())
    if (f.first == "grpc-status") grpc_status = f.second;
  const bool serving = status == 200 && grpc_status == "0" && body == std::string_view(grpc_serving, sizeof grpc_serving);
  co_return check_result{serving ? failure_kind::none : failure_kind::status, status};
}

// One check's exchange: a new connection (TLS where the upstream has it), one GET with
// Connection: close, the answer's head. The Host is health.host, else the name the
// server's address came from, else the address.
asio::awaitable<check_result> exchange(const upstream_servers& u, const server& s, connection& c) {
  const auto& h = u.health;
  boost::system::error_code aec;
  const tcp::endpoint ep(asio::ip::make_address(s.cfg.address.host, aec), s.cfg.address.port);
  if (aec) co_return check_result{failure_kind::connect};  // (servers are addresses: see upstream::expand)
  auto [cec] = co_await c.socket.async_connect(ep, use_tuple);
  if (cec) co_return check_result{failure_kind::connect};
  if (u.tls) {
    const auto tls_host = s.cfg.name.empty() ? std::string_view(s.cfg.address.host) : host_of(s.cfg.name);
    if (auto hec = co_await start_tls(c, *u.tls, tls_host, nullptr)) {
      spdlog::debug("upstream {} ({}): health check: TLS: {}", u.name, s.address, hec.message());
      co_return check_result{failure_kind::connect};
    }
  }
  const auto& host = !h.host.empty() ? h.host : !s.cfg.name.empty() ? s.cfg.name : s.address;
  if (u.h2) co_return co_await exchange_h2(u, host, c);
  const std::string request = "GET " + h.path + " HTTP/1.1\r\nHost: " + host +
                              "\r\nUser-Agent: floodgate-health-check\r\nConnection: close\r\n\r\n";
  auto [wec, wn] = co_await asio::async_write(c, asio::buffer(request), use_tuple);
  if (wec) co_return check_result{failure_kind::reset};
  beast::flat_buffer buffer(16 * 1024);
  bhttp::response_parser<bhttp::empty_body> parser;
  parser.header_limit(16 * 1024);
  auto [hec, hn] = co_await bhttp::async_read_header(c, buffer, parser, use_tuple);
  if (hec) co_return check_result{failure_kind::reset};
  const auto status = parser.get().result_int();
  co_return check_result{check_passes(h, status) ? failure_kind::none : failure_kind::status, status};
}

// One check, the whole of it within health.timeout.
asio::awaitable<check_result> check_once(const upstream_servers& u, const server& s) {
  using namespace asio::experimental::awaitable_operators;
  connection c(co_await asio::this_coro::executor);
  asio::steady_timer timer(c.socket.get_executor());
  timer.expires_after(u.health.timeout);
  auto r = co_await (exchange(u, s, c) || timer.async_wait(use_tuple));
  boost::system::error_code ignored;
  c.socket.shutdown(tcp::socket::shutdown_both, ignored);
  if (r.index() == 1) co_return check_result{failure_kind::timeout};
  co_return std::get<0>(r);
}

// A server's checks, until an update or stop replaces the set. `st` outlives the loop
// (the io_context that runs it is its member).
asio::awaitable<void> check_loop(health_checker::state* st, std::shared_ptr<const server_set> set, std::size_t ui,
                                 std::size_t i, std::uint64_t generation, std::chrono::milliseconds first_wait) {
  const auto& u = set->all()[ui];
  const auto& s = u.servers[i];
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (auto wait = first_wait;; wait = u.health.interval) {
    timer.expires_after(wait);
    co_await timer.async_wait(use_tuple);
    if (st->stopping || st->generation != generation) co_return;
    if (st->in_flight >= health_checker::max_in_flight) continue;
    ++st->in_flight;
    const auto r = co_await check_once(u, s);
    --st->in_flight;
    if (st->stopping || st->generation != generation) co_return;
    record_check(u, s, r);
  }
}

}  // namespace

bool record_check(const upstream_servers& u, const server& s, check_result r) {
  auto& h = *s.health;
  h.checks.fetch_add(1, std::memory_order_relaxed);
  const bool failing = h.check_failing.load(std::memory_order_relaxed);
  if (r.why == failure_kind::none) {
    h.check_fails_in_row.store(0, std::memory_order_relaxed);
    const unsigned passes = h.check_passes_in_row.fetch_add(1, std::memory_order_relaxed) + 1;
    if (!failing || passes < u.health.rise) return false;
    h.check_failing.store(false, std::memory_order_relaxed);
    spdlog::info("upstream {}: server {} passed {} health check(s) in a row: back in service", u.name, s.address,
                 passes);
    return true;
  }
  h.check_passes_in_row.store(0, std::memory_order_relaxed);
  const unsigned fails = h.check_fails_in_row.fetch_add(1, std::memory_order_relaxed) + 1;
  h.check_failures.fetch_add(1, std::memory_order_relaxed);
  h.check_last.store(r.why, std::memory_order_relaxed);
  h.check_status.store(r.status, std::memory_order_relaxed);
  if (failing || fails < u.health.fall) {
    if (!failing) spdlog::debug("upstream {}: server {} failed a health check: {}", u.name, s.address, words(r));
    return false;
  }
  h.check_failing.store(true, std::memory_order_relaxed);
  spdlog::warn("upstream {}: server {} failed {} health check(s) in a row (last: {}): out of service until {} pass",
               u.name, s.address, fails, words(r), u.health.rise);
  return true;
}

health_checker::health_checker() : st_(std::make_unique<state>()) {}

health_checker::~health_checker() { stop(); }

void health_checker::update(std::shared_ptr<const server_set> set) {
  std::lock_guard lock(mu_);
  const auto all = set->all();
  const bool any = std::any_of(all.begin(), all.end(), [](const auto& u) { return u.health.enabled; });
  if (!thread_.joinable()) {
    if (!any || st_->stopping) return;
    st_->work.emplace(st_->ioc.get_executor());
    thread_ = std::thread([st = st_.get()] { obs::run_logged(st->ioc, "health checks"); });
  }
  asio::post(st_->ioc, [st = st_.get(), set = std::move(set)] {
    const auto generation = ++st->generation;
    for (std::size_t ui = 0; ui < set->all().size(); ++ui) {
      const auto& u = set->all()[ui];
      if (!u.health.enabled) {
        // Checks turned off: in service again (the set was made so, but a check of the
        // old generation may have ended since, on this thread, and written its result).
        for (const auto& s : u.servers) {
          s.health->check_failing.store(false, std::memory_order_relaxed);
          s.health->check_passes_in_row.store(0, std::memory_order_relaxed);
          s.health->check_fails_in_row.store(0, std::memory_order_relaxed);
        }
        continue;
      }
      const auto n = u.servers.size();
      for (std::size_t i = 0; i < n; ++i) {
        // Spread over the interval, so that the servers are not checked all at once.
        const auto first = u.health.interval * static_cast<long>(i) / static_cast<long>(n);
        asio::co_spawn(st->ioc, check_loop(st, set, ui, i, generation, first), asio::detached);
      }
    }
  });
}

void health_checker::stop() {
  std::lock_guard lock(mu_);
  if (!thread_.joinable()) return;
  asio::post(st_->ioc, [st = st_.get()] {
    st->stopping = true;
    st->work.reset();
    st->ioc.stop();
  });
  thread_.join();
}

}  // namespace fg::upstream
