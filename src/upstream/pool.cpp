#include "upstream/pool.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <sys/socket.h>
#include "util/asio.hpp"

namespace fg::upstream {

using util::use_tuple;

using asio::ip::tcp;

void pool::configure(const std::vector<config::upstream_config>& upstreams) {
  decltype(slots_) next;
  for (const auto& u : upstreams) {
    auto& n = next[u.name];
    n.cfg = u;
    auto old = slots_.find(u.name);
    if (old != slots_.end() && old->second.cfg.address.str() == u.address.str()) {
      n.idle = std::move(old->second.idle);
      n.endpoints = std::move(old->second.endpoints);
      n.resolved_at = old->second.resolved_at;
      n.address_id = old->second.address_id;
    } else {
      n.address_id = ++next_address_id_;
    }
    if (n.idle.size() > n.cfg.max_idle) n.idle.resize(n.cfg.max_idle);
  }
  slots_ = std::move(next);
  last_ = nullptr;
  count_idle();
}

void pool::count_idle() {
  std::size_t n = 0;
  for (const auto& [name, s] : slots_) n += s.idle.size();
  idle_total_.store(n, std::memory_order_relaxed);
}

pool::slot* pool::find(std::string_view name) {
  if (last_ && last_->first == name) return &last_->second;
  auto it = slots_.find(name);
  if (it == slots_.end()) return nullptr;
  last_ = &*it;
  return &it->second;
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

connection_ptr pool::take_idle(const config::upstream_config& upstream, deadline::entry& watch) {
  auto* s = find(upstream.name);
  // (an upstream a reload removed or moved has no idle connections for this request)
  if (!s || s->cfg.address.str() != upstream.address.str()) return nullptr;
  auto now = deadline::coarse_now;
  while (!s->idle.empty()) {
    auto c = std::move(s->idle.back());
    s->idle.pop_back();
    idle_total_.store(idle_total_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    if (still_usable(*c, now)) {
      c->reused = true;
      watch.upstream = &c->socket;
      return c;
    }
  }
  return nullptr;
}

asio::awaitable<connection_ptr> pool::connect(const config::upstream_config& want, deadline::entry& watch,
                                              boost::system::error_code& ec) {
  // The pool's slot for this upstream, if it is still the one the request was routed
  // to: a reload may have removed it or moved its address meanwhile, and a request
  // that started before the reload still goes where its configuration says (unpooled).
  const std::string name = want.name;  // the caller's config may not outlive a reload
  const auto cfg = want;
  auto same = [&](slot* s) { return s && s->cfg.address.str() == cfg.address.str(); };
  auto* s = find(name);
  if (!same(s)) s = nullptr;
  auto now = std::chrono::steady_clock::now();
  watch.arm(cfg.connect_timeout);
  std::vector<tcp::endpoint> eps;
  if (s && !s->endpoints.empty() && now - s->resolved_at <= std::chrono::seconds(30)) {
    eps = s->endpoints;
  } else {
    tcp::resolver resolver(ex_);
    auto port = std::to_string(cfg.address.port);
    auto [rec, results] = co_await resolver.async_resolve(cfg.address.host, port, tcp::resolver::numeric_service, use_tuple);
    if (rec) {
      ec = rec;
      co_return nullptr;
    }
    for (const auto& r : results) eps.push_back(r.endpoint());
    // The slot may have gone (or changed) with a reload during the resolve.
    if (s = find(name); same(s)) {
      s->endpoints = eps;
      s->resolved_at = now;
    }
  }
  if (eps.empty()) {
    ec = asio::error::not_found;
    co_return nullptr;
  }
  auto c = std::make_unique<connection>(ex_);
  s = find(name);
  c->address_id = same(s) ? s->address_id : 0;  // 0: never taken back into the pool
  watch.upstream = &c->socket;
  auto [cec, ep] = co_await asio::async_connect(c->socket, eps, use_tuple);
  if (cec) {
    watch.upstream = nullptr;
    ec = watch.expired ? boost::system::error_code(asio::error::timed_out) : cec;
    // Resolve again next time: the address may have moved.
    if (s = find(name); same(s)) s->resolved_at = {};
    co_return nullptr;
  }
  c->socket.set_option(tcp::no_delay(true), cec);
  ec = {};
  co_return c;
}

void pool::release(std::string_view upstream, connection_ptr c) {
  auto* s = find(upstream);
  // Bytes after a complete response mean the upstream is out of step: never reuse.
  if (!s || s->idle.size() >= s->cfg.max_idle || c->buffer.size() != 0 || c->address_id != s->address_id) return;
  c->idle_since = deadline::coarse_now;
  s->idle.push_back(std::move(c));
  idle_total_.store(idle_total_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void pool::close_idle() {
  for (auto& [name, s] : slots_) s.idle.clear();
  idle_total_.store(0, std::memory_order_relaxed);
}

std::size_t pool::idle_count(std::string_view upstream) const {
  auto it = slots_.find(upstream);
  return it == slots_.end() ? 0 : it->second.idle.size();
}

}  // namespace fg::upstream
