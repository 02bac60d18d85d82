#include "app/worker.hpp"

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

#include "limit/script.hpp"
#include "upstream/send_batch.hpp"

#include "http/session.hpp"
#include "obs/access_log.hpp"

namespace fg::app {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// A batch of requests that one Redis reply answered resumes inside a send_batch scope:
// their upstream writes go out together.
void resume_with_sends(std::size_t n, void (*resume)(void*), void* arg) {
  upstream::send_batch::collect sends(n > 1);
  resume(arg);
}

std::string random_nonce_prefix() {
  std::random_device rd;
  char buf[24];
  std::snprintf(buf, sizeof buf, "%08x%08x-", rd(), rd());
  return buf;
}

}  // namespace

worker::worker(unsigned id, std::shared_ptr<const http::runtime> rt, std::shared_ptr<obs::access_log> access,
               limit::memory_store* memory, http::connection_limit* connections)
    // One thread per io_context: socket I/O needs no locking (posts from other threads still do).
    : metrics_(*rt->cfg), ioc_(std::make_unique<asio::io_context>(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO)), pool_(std::make_unique<upstream::pool>(ioc_->get_executor())) {
  ctx_.id = id;
  ctx_.rt = std::move(rt);
  ctx_.pool = pool_.get();
  ctx_.access = std::move(access);
  ctx_.connections = connections;
  memory_ = std::make_unique<limit::memory_source>(*memory);
  limit::decision_source* store = memory_.get();
  if (ctx_.rt->cfg->store == config::store_kind::redis) {
    redis_ = std::make_shared<redis::connection>(ioc_->get_executor(), ctx_.rt->cfg->redis, limit::limiter_script);
    batcher_ = std::make_unique<limit::redis_batcher>(ioc_->get_executor(), redis_, 128, &resume_with_sends);
    redis_source_ = std::make_unique<limit::redis_source>(*batcher_, redis_, random_nonce_prefix());
    denies_ = std::make_unique<limit::deny_cache>();
    store = redis_source_.get();
    // Not usable until the first tick sees it connected.
    store_usable_.store(false, std::memory_order_relaxed);
  }
  // Lease ids unique across workers: the worker id in the top bits.
  limits_ = std::make_unique<limit::policy>(*store, *memory_, denies_.get(), static_cast<std::uint64_t>(id) << 48);
  limits_->set_metrics(&metrics_);
  if (batcher_) batcher_->set_metrics(&metrics_);
  ctx_.limits = limits_.get();
  ctx_.metrics = &metrics_;
  pool_->configure(ctx_.rt->cfg->upstreams);
}

worker::~worker() {
  stop();
  join();
  // Sockets first, then the io_context (which destroys suspended sessions), then the rest.
  acceptor_.reset();
  pool_->close_idle();
  if (redis_) {
    redis_->stop();
    // Sessions destroyed with the io_context still give their leases back: to Redis
    // no longer (the source lets go of its connection), to the memory store as ever.
    redis_source_->detach();
    // Every reference to the connection must be gone by the time the io_context's
    // services are destroyed: ours now, what handlers hold during its shutdown.
    batcher_.reset();
    redis_.reset();
  }
  ioc_.reset();
}

void worker::start(int listen_fd) {
  int fd = ::dup(listen_fd);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "dup");
  auto ep = tcp::endpoint();
  {
    // Learn the protocol family from the socket itself.
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    ep = ss.ss_family == AF_INET6 ? tcp::endpoint(tcp::v6(), 0) : tcp::endpoint(tcp::v4(), 0);
  }
  acceptor_ = std::make_unique<tcp::acceptor>(*ioc_, ep.protocol(), fd);
  asio::co_spawn(*ioc_, accept_loop(), asio::detached);
  asio::co_spawn(*ioc_, sweep_deadlines(), asio::detached);
  if (redis_) asio::post(*ioc_, [r = redis_] { r->start(); });
  thread_ = std::thread([this] {
    for (;;) {
      try {
        ioc_->run();
        break;
      } catch (const std::exception& e) {
        spdlog::error("worker {}: {}", ctx_.id, e.what());
      }
    }
  });
}

asio::awaitable<void> worker::accept_loop() {
  for (;;) {
    auto [ec, socket] = co_await acceptor_->async_accept(asio::as_tuple(asio::use_awaitable));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_->is_open()) co_return;
      // Out of descriptors or similar: back off instead of spinning.
      spdlog::warn("worker {}: accept failed: {}", ctx_.id, ec.message());
      asio::steady_timer t(*ioc_, std::chrono::milliseconds(100));
      co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    if (ctx_.draining) continue;
    if (!admit(socket)) continue;
    http::start_session(ctx_, std::move(socket));
  }
}

bool worker::admit(tcp::socket& socket) {
  auto* limit = ctx_.connections;
  if (!limit || limit->open.fetch_add(1, std::memory_order_relaxed) < limit->max) return true;
  limit->open.fetch_sub(1, std::memory_order_relaxed);
  // Past the cap: a short 503 if the socket takes it at once, then close.
  static constexpr std::string_view busy =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n";
  (void)::send(socket.native_handle(), busy.data(), busy.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  boost::system::error_code ignored;
  socket.close(ignored);
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(deadline::coarse_now.time_since_epoch()).count();
  if (auto refused = limit->refused.add(now))
    spdlog::warn("connection limit reached ({} open, http.max_connections {}): refused {} connection(s) since the "
                 "last report",
                 limit->open.load(std::memory_order_relaxed), limit->max, refused);
  return false;
}

asio::awaitable<void> worker::sweep_deadlines() {
  // Deadlines are checked every tick (so they are precise to about 50ms) instead of
  // arming a timer per read and write; the tick also advances the coarse clock.
  asio::steady_timer tick(*ioc_);
  for (;;) {
    tick.expires_after(deadline::sweep_interval);
    auto [ec] = co_await tick.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    ctx_.deadlines.sweep(deadline::clock::now());
    store_usable_.store(!redis_ || redis_->connected(), std::memory_order_relaxed);
    // Drained and nothing left: let the io_context run out of work.
    if (ctx_.draining && ctx_.deadlines.empty()) {
      if (redis_) redis_->stop();
      co_return;
    }
  }
}

void worker::drain() {
  asio::post(*ioc_, [this] {
    ctx_.draining = true;
    boost::system::error_code ec;
    if (acceptor_) acceptor_->close(ec);
    pool_->close_idle();
    ctx_.deadlines.cancel_idle();
  });
}

void worker::stop() { ioc_->stop(); }

void worker::join() {
  if (thread_.joinable()) thread_.join();
}

void worker::update(std::shared_ptr<const http::runtime> rt) {
  asio::post(*ioc_, [this, rt = std::move(rt)]() mutable {
    pool_->configure(rt->cfg->upstreams);
    ctx_.rt = std::move(rt);
  });
}

}  // namespace fg::app
