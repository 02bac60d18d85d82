#include "app/server.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include "admin/listener.hpp"
#include "limit/inspector.hpp"
#include "limit/memory_store.hpp"
#include "fg_version.hpp"
#include "obs/access_log.hpp"

namespace fg::app {

namespace asio = boost::asio;
using asio::ip::tcp;

server::server(std::shared_ptr<const http::runtime> rt) : rt_(std::move(rt)) {}

namespace {

// What the admin thread may see of the workers: their "store usable" atomics and the
// configuration snapshot, nothing that a worker's thread owns.
class worker_status final : public admin::status_source {
 public:
  worker_status(config::snapshot cfg, const std::vector<std::unique_ptr<worker>>& workers,
                const http::connection_limit& connections)
      : cfg_(std::move(cfg)), workers_(workers), connections_(connections) {}

  config::snapshot current_config() const override { return cfg_; }

  admin::readiness ready() const override {
    if (!cfg_) return {false, "no configuration loaded"};
    if (cfg_->store != config::store_kind::redis) return {true, {}};
    std::size_t down = 0;
    for (const auto& w : workers_) down += w->store_usable() ? 0 : 1;
    if (down == 0 && !workers_.empty()) return {true, {}};
    return {false, fmt::format("redis unreachable on {} of {} workers", down, workers_.size())};
  }

  std::string metrics() const override {
    std::vector<const obs::worker_metrics*> shards;
    for (const auto& w : workers_) shards.push_back(&w->metrics());
    obs::process_gauges g;
    g.open_connections = connections_.open.load(std::memory_order_relaxed);
    for (const auto& w : workers_) g.pooled_connections += w->pooled_connections();
    g.version = FG_VERSION;
    return obs::render_metrics(*cfg_, shards, g);
  }

 private:
  config::snapshot cfg_;
  const std::vector<std::unique_ptr<worker>>& workers_;
  const http::connection_limit& connections_;
};

// Binds the proxy's listening socket; false (logged) when it cannot.
bool bind_listener(tcp::acceptor& listener, const config::endpoint& at) {
  try {
    tcp::resolver resolver(listener.get_executor());
    auto results = resolver.resolve(at.host, std::to_string(at.port), tcp::resolver::passive);
    auto ep = results.begin()->endpoint();
    listener.open(ep.protocol());
    listener.set_option(tcp::acceptor::reuse_address(true));
    listener.bind(ep);
    listener.listen(asio::socket_base::max_listen_connections);
  } catch (const std::exception& e) {
    spdlog::error("cannot listen on {}: {}", at.str(), e.what());
    return false;
  }
  listener.non_blocking(true);
  return true;
}

}  // namespace

std::size_t max_connections(const config::config& cfg, unsigned workers) {
  // The soft descriptor limit is raised to the hard one (as nginx's worker_rlimit_nofile).
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rlimit want = rl;
    want.rlim_cur = std::min<rlim_t>(rl.rlim_max, 1 << 20);
    if (::setrlimit(RLIMIT_NOFILE, &want) == 0) rl = want;
  }
  if (cfg.http.max_connections) return cfg.http.max_connections;
  // Each connection may hold an upstream one too; the rest is for pooled upstream and
  // Redis connections, the listener, logs and headroom.
  std::size_t idle = 0;
  for (const auto& u : cfg.upstreams) idle += u.max_idle;
  const std::size_t reserve = 64 + workers * (idle + 4);
  const auto fds = static_cast<std::size_t>(rl.rlim_cur == RLIM_INFINITY ? 1 << 20 : rl.rlim_cur);
  return fds > reserve + 2 ? (fds - reserve) / 2 : 1;
}

int server::run() {
  const auto& cfg = *rt_->cfg;
  asio::io_context main_ioc;
  tcp::acceptor listener(main_ioc);
  if (!bind_listener(listener, cfg.listen)) return 1;
  std::vector<std::unique_ptr<worker>> workers;
  // The admin listener (admin.listen) on a thread of its own, bound before any worker runs.
  http::connection_limit connections;
  worker_status status(rt_->cfg, workers, connections);
  std::optional<admin::listener> admin_listener;
  if (cfg.admin.listen) {
    admin_listener.emplace(status);
    if (auto ec = admin_listener->listen(*cfg.admin.listen)) {
      spdlog::error("cannot listen on admin.listen {}: {}", cfg.admin.listen->str(), ec.message());
      return 1;
    }
  }

  unsigned n = cfg.workers ? cfg.workers : std::max(1u, std::thread::hardware_concurrency());
  auto access = obs::access_log::open(cfg.log);
  limit::memory_store memory(cfg.memory.max_keys);
  connections.max = max_connections(cfg, n);
  for (unsigned i = 0; i < n; ++i) workers.push_back(std::make_unique<worker>(i, rt_, access, &memory, &connections));
  for (auto& w : workers) w->start(listener.native_handle());
  spdlog::info("floodgate listening on {} with {} worker(s), {} route(s), at most {} connections", cfg.listen.str(), n,
               cfg.routes.size(), connections.max);
  if (admin_listener) {
    // /limits reads the store on the admin's own thread and connection.
    admin_listener->set_inspector(
        std::make_unique<limit::store_inspector>(admin_listener->executor(), memory, cfg));
    admin_listener->start();
    spdlog::info("admin listening on {}", cfg.admin.listen->str());
  }
  if (cfg.store == config::store_kind::redis && cfg.redis.mode != config::redis_mode::standalone)
    spdlog::warn("redis.mode cluster/sentinel is not implemented yet: using the first address as a standalone server");

  asio::signal_set signals(main_ioc, SIGTERM, SIGINT);
  int signal_number = 0;
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (!ec) signal_number = sig;
  });
  main_ioc.run();
  main_ioc.restart();
  spdlog::info("signal {}: draining (up to {}ms)", signal_number, cfg.http.drain_timeout.count());
  listener.close();
  // Draining is not serving: the admin listener goes first (its thread joins, its
  // connections close).
  admin_listener.reset();
  for (auto& w : workers) w->drain();

  // Workers return from run() once their last connection ends; the timer bounds the wait.
  std::atomic<unsigned> done{0};
  std::vector<std::thread> joiners;
  for (auto& w : workers)
    joiners.emplace_back([&, wp = w.get()] {
      wp->join();
      if (++done == workers.size()) asio::post(main_ioc, [&] { main_ioc.stop(); });
    });
  asio::steady_timer deadline(main_ioc, cfg.http.drain_timeout);
  deadline.async_wait([&](const boost::system::error_code& ec) {
    if (ec) return;
    spdlog::warn("drain timeout: closing remaining connections");
    for (auto& w : workers) w->stop();
  });
  // A second signal stops at once.
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec) for (auto& w : workers) w->stop();
  });
  main_ioc.run();
  for (auto& t : joiners) t.join();
  workers.clear();
  spdlog::info("drained; exiting");
  return 0;
}

}  // namespace fg::app
