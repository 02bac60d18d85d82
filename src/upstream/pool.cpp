#include "upstream/pool.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <sys/socket.h>

namespace fg::upstream {

namespace asio = boost::asio;
using asio::ip::tcp;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

void pool::configure(const std::vector<config::upstream_config>& upstreams) {
  std::vector<slot> next(upstreams.size());
  for (std::size_t i = 0; i < upstreams.size(); ++i) {
    next[i].cfg = upstreams[i];
    for (auto& old : slots_) {
      if (old.cfg.name == upstreams[i].name && old.cfg.address.str() == upstreams[i].address.str()) {
        next[i].idle = std::move(old.idle);
        next[i].endpoints = std::move(old.endpoints);
        next[i].resolved_at = old.resolved_at;
      }
    }
    if (next[i].idle.size() > next[i].cfg.max_idle) next[i].idle.resize(next[i].cfg.max_idle);
  }
  slots_ = std::move(next);
}

namespace {

// A pooled connection is dead if the peer closed it or sent unsolicited bytes. Origins
// close idle connections after seconds, not microseconds: a connection idle for less
// than a second is taken as is (saving a syscall per request under load); the stale
// retry covers the rare race.
bool still_usable(connection& c, std::chrono::steady_clock::time_point now) {
  if (c.buffer.size() != 0) return false;
  if (now - c.idle_since < std::chrono::seconds(1)) return true;
  char probe;
  auto fd = c.socket.native_handle();
  auto n = ::recv(fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

connection_ptr pool::take_idle(std::size_t upstream, app::session_entry& session) {
  auto& s = slots_.at(upstream);
  auto now = app::coarse_now;
  while (!s.idle.empty()) {
    auto c = std::move(s.idle.back());
    s.idle.pop_back();
    if (still_usable(*c, now)) {
      c->reused = true;
      session.upstream = &c->socket;
      return c;
    }
  }
  return nullptr;
}

asio::awaitable<connection_ptr> pool::connect(std::size_t upstream, app::session_entry& session,
                                              boost::system::error_code& ec) {
  auto& s = slots_.at(upstream);
  auto cfg = s.cfg;  // slot may move during the awaits below (reload)
  auto now = std::chrono::steady_clock::now();
  session.arm(cfg.connect_timeout);
  if (s.endpoints.empty() || now - s.resolved_at > std::chrono::seconds(30)) {
    tcp::resolver resolver(ex_);
    auto port = std::to_string(cfg.address.port);
    auto [rec, results] = co_await resolver.async_resolve(cfg.address.host, port, tcp::resolver::numeric_service, use_tuple);
    if (rec) {
      ec = rec;
      co_return nullptr;
    }
    std::vector<tcp::endpoint> eps;
    for (const auto& r : results) eps.push_back(r.endpoint());
    if (upstream < slots_.size() && slots_[upstream].cfg.name == cfg.name) {
      slots_[upstream].endpoints = eps;
      slots_[upstream].resolved_at = now;
    }
  }
  auto eps = slots_.at(upstream).endpoints;
  auto c = std::make_unique<connection>(ex_);
  session.upstream = &c->socket;
  auto [cec, ep] = co_await asio::async_connect(c->socket, eps, use_tuple);
  if (cec) {
    session.upstream = nullptr;
    ec = session.expired ? boost::system::error_code(asio::error::timed_out) : cec;
    // Resolve again next time: the address may have moved.
    if (upstream < slots_.size()) slots_[upstream].resolved_at = {};
    co_return nullptr;
  }
  c->socket.set_option(tcp::no_delay(true), cec);
  ec = {};
  co_return c;
}

void pool::release(std::size_t upstream, connection_ptr c) {
  if (upstream >= slots_.size()) return;
  auto& s = slots_[upstream];
  // Bytes after a complete response mean the upstream is out of step: never reuse.
  if (s.idle.size() >= s.cfg.max_idle || c->buffer.size() != 0) return;
  c->idle_since = app::coarse_now;
  s.idle.push_back(std::move(c));
}

void pool::close_idle() {
  for (auto& s : slots_) s.idle.clear();
}

std::size_t pool::idle_count(std::size_t upstream) const {
  return upstream < slots_.size() ? slots_[upstream].idle.size() : 0;
}

}  // namespace fg::upstream
