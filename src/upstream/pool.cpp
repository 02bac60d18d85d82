#include "upstream/pool.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include "net/peek.hpp"
#include "net/unsent.hpp"
#include "upstream/h2_session.hpp"
#include "upstream/send_batch.hpp"
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
    for (const auto& sv : u.servers) {
      server_slot ns;
      ns.address = sv.address;
      if (old != slots_.end()) {
        auto& olds = old->second.servers;
        auto it = std::find_if(olds.begin(), olds.end(), [&](auto& o) { return o.address == sv.address; });
        // (TLS settings that changed: connections and sessions of the old ones go)
        // (a protocol changed: the same)
        if (it != olds.end() && old->second.cfg.tls == u.tls && old->second.cfg.proto == u.proto) ns = std::move(*it);
      }
      if (ns.address_id == 0) ns.address_id = ++next_address_id_;
      if (ns.idle.size() > u.max_idle) ns.idle.resize(u.max_idle);
      n.servers.push_back(std::move(ns));
    }
    // A connection's `server` is its index: kept connections are renumbered.
    for (std::size_t i = 0; i < n.servers.size(); ++i)
      for (auto& c : n.servers[i].idle) c->server = i;
    if (old != slots_.end() && old->second.servers.size() == n.servers.size()) n.picks = std::move(old->second.picks);
  }
  slots_ = std::move(next);
  last_ = nullptr;
  count_idle();
}

void pool::count_idle() {
  std::size_t n = 0;
  for (const auto& [name, s] : slots_)
    for (const auto& sv : s.servers) n += sv.idle.size();
  idle_total_.store(n, std::memory_order_relaxed);
}

pool::slot* pool::find(std::string_view name) {
  if (last_ && last_->first == name) return &last_->second;
  auto it = slots_.find(name);
  if (it == slots_.end()) return nullptr;
  last_ = &*it;
  return &it->second;
}

pool::server_slot* pool::find(std::string_view name, const config::upstream_config& want, std::size_t i) {
  auto* s = find(name);
  if (!s || i >= s->servers.size() || i >= want.servers.size()) return nullptr;
  auto& sv = s->servers[i];
  return sv.address == want.servers[i].address ? &sv : nullptr;
}

std::optional<std::size_t> pool::pick(const config::upstream_config& upstream, const upstream_servers& servers,
                                      const pick_input& in) {
  auto* s = find(upstream.name);
  if (s && s->servers.size() == servers.servers.size()) return upstream::pick(servers, s->picks, in);
  pick_state scratch;  // a request of a config a reload replaced: balanced without memory
  return upstream::pick(servers, scratch, in);
}

namespace {

// A pooled connection is dead if the peer closed it or sent bytes nobody asked for (a
// late second response would otherwise be read as the next request's answer). Its
// socket is looked at on every reuse, however short the idle time: bytes that came
// after the last response was read are seen by nothing else (nginx keeps a read handler
// on its idle connections for this). Where the request's write will be batched (plain
// TCP, send_batch::current()), the batch looks, at all its writes' sockets in one
// submission (send_batch::add's look_first): no system call of its own under load.
// Else here, one.
bool still_usable(connection& c, std::chrono::steady_clock::time_point now, std::chrono::milliseconds timeout) {
  if (c.buffer.size() != 0 || c.tls.holds_input()) return false;
  if (now - c.idle_since >= timeout) return false;  // (between two of the sweeper's rounds)
  c.look_on_send = !c.tls && send_batch::current();
  if (c.look_on_send) return true;
  return net::peek_input(c.socket.native_handle()) == net::pending_input::nothing;
}

}  // namespace

connection_ptr pool::take_idle(const config::upstream_config& upstream, deadline::entry& watch, std::size_t server) {
  // (a server a reload removed or moved has no idle connections for this request)
  auto* s = find(upstream.name, upstream, server);
  if (!s) return nullptr;
  auto now = deadline::coarse_now;
  while (!s->idle.empty()) {
    auto c = std::move(s->idle.back());
    s->idle.pop_back();
    idle_total_.store(idle_total_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    if (still_usable(*c, now, upstream.idle_timeout)) {
      c->reused = true;
      watch.watch_upstream(&c->socket);
      return c;
    }
  }
  return nullptr;
}

asio::awaitable<connection_ptr> pool::connect(const config::upstream_config& want, deadline::entry& watch,
                                              boost::system::error_code& ec, std::size_t server,
                                              const tls::client_context* tls) {
  // The pool's slot for this server, if it is still the one the request was routed
  // to: a request of a configuration a reload replaced still goes where that says, on a
  // connection never pooled. (Nothing of `want` is read after the connect's await: it
  // may not outlive a reload.)
  if (server >= want.servers.size()) {  // no server (its names have not resolved yet)
    ec = asio::error::host_not_found;
    co_return nullptr;
  }
  // Servers are addresses: names were resolved before the configuration was (expand).
  boost::system::error_code aec;
  const auto& address = want.servers[server].address;
  const tcp::endpoint ep(asio::ip::make_address(address.host, aec), address.port);
  if (aec) {
    ec = asio::error::host_not_found;
    co_return nullptr;
  }
  const auto& sv = want.servers[server];
  const std::string host(tls ? (sv.name.empty() ? std::string_view(sv.address.host) : host_of(sv.name)) : "");
  auto* s = find(want.name, want, server);
  // (held by the coroutine: the slot may go with a reload during the connect)
  tls::session_ptr resume;
  if (tls && s && s->session && SSL_SESSION_up_ref(s->session.get()) == 1) resume.reset(s->session.get());
  watch.arm(want.connect_timeout);
  auto c = std::make_unique<connection>(ex_);
  c->address_id = s ? s->address_id : 0;  // 0: never taken back into the pool
  c->server = server;
  watch.watch_upstream(&c->socket);
  auto [cec] = co_await c->socket.async_connect(ep, use_tuple);
  if (cec) {
    watch.forget_upstream();
    ec = watch.expired() ? boost::system::error_code(asio::error::timed_out) : cec;
    co_return nullptr;
  }
  c->socket.set_option(tcp::no_delay(true), cec);
  net::bound_unsent(c->socket.native_handle());  // (an upload to a slow reader moves on as it reads)
  if (tls) {
    auto hec = co_await start_tls(*c, *tls, host, resume.get());
    if (hec) {
      watch.forget_upstream();
      ec = watch.expired() ? boost::system::error_code(asio::error::timed_out) : hec;
      co_return nullptr;
    }
  }
  ec = {};
  co_return c;
}

void pool::release(std::string_view upstream, connection_ptr c) {
  auto* s = find(upstream);
  if (!s || c->address_id == 0) return;
  // (a reload may have moved the server in the list: found by its address's id)
  if (c->server >= s->servers.size() || s->servers[c->server].address_id != c->address_id) {
    auto it = std::find_if(s->servers.begin(), s->servers.end(), [&](auto& sv) { return sv.address_id == c->address_id; });
    if (it == s->servers.end()) return;
    c->server = static_cast<std::size_t>(it - s->servers.begin());
  }
  auto& sv = s->servers[c->server];
  if (c->tls)
    if (auto session = tls::resumable_session(c->tls.native_handle())) sv.session = std::move(session);
  // Bytes after a complete response mean the upstream is out of step: never reuse.
  if (sv.idle.size() >= s->cfg.max_idle || c->buffer.size() != 0) return;
  c->idle_since = deadline::coarse_now;
  sv.idle.push_back(std::move(c));
  idle_total_.store(idle_total_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

std::shared_ptr<h2_session> pool::take_h2(const config::upstream_config& upstream, std::size_t server) {
  auto* s = find(upstream.name, upstream, server);
  if (!s) return nullptr;
  // (one going away or retired is let go: it ends with its last call)
  std::erase_if(s->h2, [](const auto& h) { return h.s->leaving(); });
  for (auto& h : s->h2)
    if (h.s->open_for_more()) return h.s;
  return nullptr;
}

bool pool::add_h2(const config::upstream_config& upstream, std::size_t server, const std::shared_ptr<h2_session>& h) {
  auto* s = find(upstream.name, upstream, server);
  if (!s || h->conn().address_id != s->address_id) return false;
  std::erase_if(s->h2, [](const auto& k) { return k.s->leaving(); });
  if (s->h2.size() >= std::max<std::size_t>(1, upstream.max_idle)) return false;
  s->h2.emplace_back(h);
  return true;
}

h2_pooled& h2_pooled::operator=(h2_pooled&& o) noexcept {
  if (this != &o) {
    if (s) s->unpool();
    s = std::move(o.s);
  }
  return *this;
}

h2_pooled::~h2_pooled() {
  if (s) s->unpool();
}

void pool::close_idle() {
  for (auto& [name, s] : slots_)
    for (auto& sv : s.servers) {
      sv.idle.clear();
      // (an HTTP/2 connection with streams open ends with them: it is no longer offered)
      sv.h2.clear();
    }
  idle_total_.store(0, std::memory_order_relaxed);
}

void pool::close_expired(std::chrono::steady_clock::time_point now) {
  bool closed = false;
  for (auto& [name, s] : slots_)
    for (auto& sv : s.servers) {
      // (released at the back, taken from the back: the oldest are at the front)
      auto fresh = std::find_if(sv.idle.begin(), sv.idle.end(),
                                [&](const connection_ptr& c) { return now - c->idle_since < s.cfg.idle_timeout; });
      closed |= fresh != sv.idle.begin();
      sv.idle.erase(sv.idle.begin(), fresh);
      std::erase_if(sv.h2, [&](const auto& h) {
        return h.s->leaving() || (!h.s->active() && now - h.s->idle_since >= s.cfg.idle_timeout);
      });
    }
  if (closed) count_idle();
}

std::size_t pool::idle_count(std::string_view upstream) const {
  auto it = slots_.find(upstream);
  if (it == slots_.end()) return 0;
  std::size_t n = 0;
  for (const auto& sv : it->second.servers) n += sv.idle.size();
  return n;
}

}  // namespace fg::upstream
