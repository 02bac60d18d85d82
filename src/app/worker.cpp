#include "app/worker.hpp"

#include "store/inspector.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <spdlog/spdlog.h>

#include <sys/socket.h>
#include <unistd.h>

#include <random>

#include "store/cluster_batcher.hpp"
#include "store/limiter_script.hpp"
#include "upstream/send_batch.hpp"

#include "http/session.hpp"
#include "obs/access_log.hpp"
#include "obs/logging.hpp"
#include "util/asio.hpp"

namespace fg::app {

using asio::ip::tcp;

namespace {

// A batch of requests that one Redis reply answered resumes inside a send_batch scope:
// their upstream writes go out together.
void resume_with_sends(std::size_t n, void (*resume)(void*), void* arg) {
  upstream::send_batch::collect sends(n > 1);
  resume(arg);
}

// The worker's loop, in turns (upstream::send_batch::in_turns): the writes of a turn of
// the loop, upstream and (plain TCP) to clients, go out in one submission (as those of
// requests one Redis reply resumes do); a turn with one write sends it at once: nothing
// waits for a batch at low load. What a handler throws is logged and the loop goes on
// (obs::run_logged).
void run_in_turns(asio::io_context& ioc, const char* what) {
  upstream::send_batch::in_turns(ioc.get_executor());
  obs::run_logged(ioc, what);
}

std::string random_nonce_prefix() {
  std::random_device rd;
  char buf[24];
  std::snprintf(buf, sizeof buf, "%08x%08x-", rd(), rd());
  return buf;
}

}  // namespace

// One thread per io_context: socket I/O needs no locking (posts from other threads still do).
worker::worker(unsigned id, std::shared_ptr<const http::compiled_config> rt, std::shared_ptr<obs::access_log> access,
               store::memory_store* memory, http::connection_limit* connections, obs::span_exporter* spans)
    : ioc_(std::make_unique<asio::io_context>(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO)),
      pool_(std::make_unique<upstream::pool>(ioc_->get_executor())) {
  ctx_.id = id;
  ctx_.rt = std::move(rt);
  ctx_.pool = pool_.get();
  ctx_.access = std::move(access);
  ctx_.connections = connections;
  ctx_.spans = spans;
  // Counted only when something can read the counts: with an admin listener
  // (admin.listen, which only a restart changes).
  ctx_.metrics = ctx_.rt->cfg->admin.listen ? &metrics_ : nullptr;
  metrics_.reserve(*ctx_.rt->cfg);
  memory_ = std::make_unique<store::memory_source>(*memory);
  limits_ = make_limits(*ctx_.rt->cfg);
  ctx_.limits = &limits_->use;
  // With Redis, not usable until the first tick sees it connected.
  store_usable_.store(!limits_->redis, std::memory_order_relaxed);
  pool_->configure(ctx_.rt->upstreams);
}

std::unique_ptr<worker::limits_stack> worker::make_limits(const config::config& cfg) {
  auto l = std::make_unique<limits_stack>();
  limit::decision_source* store = memory_.get();
  if (cfg.store == config::store_kind::redis) {
    if (cfg.redis.mode == config::redis_mode::cluster) {
      l->redis.cluster = std::make_shared<redis::cluster_client>(
          ioc_->get_executor(), cfg.redis, std::string(store::cluster_script_flags) + store::limiter_script);
      l->batcher =
          std::make_unique<store::cluster_batcher>(ioc_->get_executor(), l->redis.cluster, 128, &resume_with_sends);
    } else {
      l->redis.one = std::make_shared<redis::connection>(ioc_->get_executor(), cfg.redis, store::limiter_script);
      l->batcher = std::make_unique<store::redis_batcher>(ioc_->get_executor(), l->redis.one, 128, &resume_with_sends);
    }
    l->source = std::make_unique<store::redis_source>(*l->batcher, random_nonce_prefix());
    l->denies = std::make_unique<limit::deny_cache>();
    // A reset made on any gateway (POST /limits/reset) is recorded in the store: this
    // worker reads the new ones every few ticks and forgets its cached denials of them.
    l->resets = std::make_shared<limits_stack::resets_read>();
    l->resets->denies = l->denies.get();
    l->resets->key = store::resets_key(cfg);
    l->batcher->set_metrics(ctx_.metrics);
    store = l->source.get();
  }
  // Lease ids unique across workers and generations: the worker id in the top 16 bits,
  // the generation in the next 8 (an old generation's tunnels may still hold leases).
  const auto base = static_cast<std::uint64_t>(ctx_.id) << 48 | static_cast<std::uint64_t>(generation_++ & 0xff) << 40;
  l->policy = std::make_unique<limit::policy>(*store, *memory_, l->denies.get(), base);
  l->policy->set_metrics(ctx_.metrics);
  l->use.source = l->policy.get();
  return l;
}

void worker::limits_stack::shut() {
  if (resets) resets->denies = nullptr;
  if (!redis) return;
  redis.stop();
  // Sessions destroyed later still give their leases back: to Redis no longer (the
  // source lets go of its connection), to the memory store as ever.
  source->detach();
  // Every reference to the connection must be gone by the time the io_context's
  // services are destroyed: ours now, what handlers hold during its shutdown.
  batcher.reset();
  redis.reset();
}

worker::~worker() {
  stop();
  join();
  // Sockets first, then the io_context (which destroys suspended sessions), then the rest.
  acceptor_.reset();
  tls_acceptor_.reset();
  pool_->close_idle();
  for (auto* l : {limits_.get(), pending_.get()})
    if (l) l->shut();
  for (auto& l : retired_) l->shut();
  ioc_.reset();
}

namespace {

// A worker's own copy of a listening socket (its protocol family read from the socket).
std::unique_ptr<tcp::acceptor> acceptor_on(asio::io_context& ioc, int listen_fd) {
  int fd = ::dup(listen_fd);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "dup");
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  const auto protocol = ss.ss_family == AF_INET6 ? tcp::v6() : tcp::v4();
  return std::make_unique<tcp::acceptor>(ioc, protocol, fd);
}

}  // namespace

void worker::start(int listen_fd, int tls_fd) {
  acceptor_ = acceptor_on(*ioc_, listen_fd);
  if (tls_fd >= 0) tls_acceptor_ = acceptor_on(*ioc_, tls_fd);
  asio::co_spawn(*ioc_, sweep_deadlines(), obs::logged_end{"deadline sweeper ended"});
  if (limits_->redis) asio::post(*ioc_, [r = limits_->redis] { r.start(); });
  thread_ = std::thread([this] {
    const auto name = "worker " + std::to_string(ctx_.id);
    run_in_turns(*ioc_, name.c_str());
  });
}

void worker::accept() {
  asio::post(*ioc_, [this] {
    if (ctx_.draining) return;
    asio::co_spawn(*ioc_, accept_loop(*acceptor_, false), obs::logged_end{"accept loop ended"});
    if (tls_acceptor_)
      asio::co_spawn(*ioc_, accept_loop(*tls_acceptor_, true), obs::logged_end{"TLS accept loop ended"});
  });
}

asio::awaitable<void> worker::accept_loop(tcp::acceptor& from, bool tls) {
  for (;;) {
    tcp::endpoint peer;  // (from accept(): no getpeername per connection)
    auto [ec, socket] = co_await from.async_accept(peer, asio::as_tuple(asio::use_awaitable));
    if (ec) {
      if (ec == asio::error::operation_aborted || !from.is_open()) co_return;
      // Out of descriptors or similar: back off instead of spinning.
      spdlog::warn("worker {}: accept failed: {}", ctx_.id, ec.message());
      asio::steady_timer t(*ioc_, std::chrono::milliseconds(100));
      co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    if (ctx_.draining) continue;
    auto slot = admit(socket, tls);
    if (!slot) continue;
    if (tls) http::start_tls_session(ctx_, std::move(socket), peer.address(), std::move(*slot));
    else http::start_session(ctx_, std::move(socket), peer.address(), std::move(*slot));
  }
}

std::optional<http::connection_slot> worker::admit(tcp::socket& socket, bool tls) {
  auto* limit = ctx_.connections;
  if (auto slot = http::connection_slot::take(limit)) return slot;
  // Past the cap: a short 503 if the socket takes it at once (not in plain text to a
  // TLS client), then close.
  static constexpr std::string_view busy =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n";
  if (!tls) (void)::send(socket.native_handle(), busy.data(), busy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  boost::system::error_code ignored;
  socket.close(ignored);
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(deadline::coarse_now.time_since_epoch()).count();
  if (auto refused = limit->refused.add(now))
    spdlog::warn("connection limit reached ({} open, http.max_connections {}): refused {} connection(s) since the "
                 "last report",
                 limit->open.load(std::memory_order_relaxed), limit->max, refused);
  return std::nullopt;
}

asio::awaitable<void> worker::sweep_deadlines() {
  // Deadlines are checked every tick (so they are precise to about 50ms) instead of
  // arming a timer per read and write; the tick also advances the coarse clock.
  asio::steady_timer tick(*ioc_);
  std::uint64_t ticks = 0;
  for (;;) {
    tick.expires_after(deadline::sweep_interval);
    auto [ec] = co_await tick.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    ctx_.deadlines.sweep(deadline::clock::now());
    if (pending_ || !retired_.empty()) tend_limits(limit::now_ms());
    if (++ticks % 4 == 0) read_resets();
    if (ticks % 20 == 0) pool_->close_expired(deadline::coarse_now);  // (every second)
    store_usable_.store(!limits_->redis || limits_->redis.connected(), std::memory_order_relaxed);
    if (limits_->redis.cluster) {
      auto states = limits_->redis.cluster->master_states();
      std::lock_guard lock(masters_mu_);
      masters_ = std::move(states);
    } else if (!masters_.empty()) {
      std::lock_guard lock(masters_mu_);
      masters_.clear();
    }
    // Drained and nothing left: let the io_context run out of work.
    if (ctx_.draining && ctx_.deadlines.empty()) {
      for (auto* l : {limits_.get(), pending_.get()})
        if (l && l->redis) l->redis.stop();
      for (auto& l : retired_)
        if (l->redis) l->redis.stop();
      co_return;
    }
  }
}

void worker::drain() {
  asio::post(*ioc_, [this] {
    ctx_.draining = true;
    boost::system::error_code ec;
    if (acceptor_) acceptor_->close(ec);
    if (tls_acceptor_) tls_acceptor_->close(ec);
    pool_->close_idle();
    ctx_.deadlines.cancel_idle();
  });
}

void worker::stop() { ioc_->stop(); }

void worker::join() {
  if (thread_.joinable()) thread_.join();
}

void worker::update(std::shared_ptr<const http::compiled_config> rt, std::shared_ptr<obs::access_log> access,
                    std::function<void()> applied) {
  asio::post(*ioc_, [this, rt = std::move(rt), access = std::move(access), applied = std::move(applied)]() mutable {
    const auto& was = pending_ ? *pending_->rt->cfg : *ctx_.rt->cfg;
    const auto& now = *rt->cfg;
    if (now.store == was.store && (now.store != config::store_kind::redis || now.redis == was.redis)) {
      if (pending_) {
        // Still connecting: it takes this snapshot instead, when it is ready.
        if (pending_->applied) pending_->applied();
        pending_->rt = std::move(rt);
        pending_->access = std::move(access);
        pending_->applied = std::move(applied);
        return;
      }
      apply(std::move(rt), std::move(access));
      if (applied) applied();
      return;
    }
    // A new store: connected before it takes over, with the snapshot (no request meets
    // a store that is not there yet, nor new limits on the old store); the old one
    // serves meanwhile.
    if (pending_) {
      if (pending_->applied) pending_->applied();
      retired_.push_back(std::move(pending_));
    }
    pending_ = make_limits(now);
    pending_->ready_by = limit::now_ms() + 2000;
    pending_->rt = std::move(rt);
    pending_->access = std::move(access);
    pending_->applied = std::move(applied);
    if (pending_->redis) pending_->redis.start();
    else tend_limits(limit::now_ms());
  });
}

void worker::apply(std::shared_ptr<const http::compiled_config> rt, std::shared_ptr<obs::access_log> access) {
  metrics_.reserve(*rt->cfg);  // before any request counts under the new snapshot
  pool_->configure(rt->upstreams);
  // A denial remembered under the old numbers may not hold under the new ones.
  if (limits_->denies) limits_->denies->clear();
  ctx_.rt = std::move(rt);
  ctx_.access = std::move(access);
}

void worker::use_limits(std::unique_ptr<limits_stack> next) {
  retired_.push_back(std::move(limits_));
  limits_ = std::move(next);
  ctx_.limits = &limits_->use;
}

void worker::read_resets() {
  auto& l = *limits_;
  if (!l.resets || l.resets->in_flight || !l.redis.connected()) return;
  auto r = l.resets;
  r->in_flight = true;
  // (inclusive: a reset at the time read last may have come after that read; forgetting
  // a key twice is harmless)
  char seen[32];
  std::snprintf(seen, sizeof seen, "%.0f", r->seen);
  std::vector<std::string> args{"ZRANGEBYSCORE", r->key, seen, "+inf", "WITHSCORES", "LIMIT", "0", "1000"};
  auto done = [r](boost::system::error_code ec, redis::reply rep) {
    r->in_flight = false;
    if (ec || !r->denies || rep.type != redis::reply::kind::array) return;
    for (std::size_t i = 0; i + 1 < rep.elements.size(); i += 2) {
      r->denies->forget(rep.elements[i].str);
      // (a score that is no number reads as 0: it moves nothing)
      r->seen = std::max(r->seen, std::strtod(rep.elements[i + 1].str.c_str(), nullptr));
    }
  };
  if (l.redis.cluster) l.redis.cluster->send(redis::key_slot(r->key), args, std::move(done));
  else l.redis.one->send(args, std::move(done));
}

void worker::tend_limits(std::int64_t now_ms) {
  if (pending_ && (!pending_->redis || pending_->redis.connected() || now_ms >= pending_->ready_by)) {
    if (pending_->redis && !pending_->redis.connected())
      spdlog::warn("worker {}: the reloaded store is not connected after 2 s: using it anyway", ctx_.id);
    auto next = std::move(pending_);
    use_limits(std::move(next));
    apply(std::move(limits_->rt), std::move(limits_->access));
    if (auto done = std::exchange(limits_->applied, nullptr)) done();
  }
  // A replaced stack goes a second after its last request ended (its lease releases
  // are written by then).
  std::erase_if(retired_, [&](std::unique_ptr<limits_stack>& l) {
    if (l->use.requests) return l->idle_since = 0, false;
    if (!l->idle_since) return l->idle_since = now_ms, false;
    if (now_ms - l->idle_since < 1000) return false;
    l->shut();
    return true;
  });
}

}  // namespace fg::app
