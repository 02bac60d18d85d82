#include "app/server.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <optional>
#include <thread>

#include "admin/config_json.hpp"
#include "admin/listener.hpp"
#include "app/config_watch.hpp"
#include "app/exit_signals.hpp"
#include "app/side_files.hpp"
#include "config/loader.hpp"
#include "config/source_file.hpp"
#include "obs/notify.hpp"
#include "util/text.hpp"
#include "store/inspector.hpp"
#include "store/cluster_batcher.hpp"
#include "redis/cluster.hpp"
#include "redis/sentinel.hpp"
#include "store/memory_store.hpp"
#include "fg_version.hpp"
#include "obs/access_log.hpp"
#include "obs/span_export.hpp"
#include "obs/logging.hpp"
#include "util/asio.hpp"

namespace fg::app {

using asio::ip::tcp;

namespace {

// The file's text, as the loader reads it ("" if it cannot be read).
std::string read_file(const std::string& path) {
  std::string text;
  if (config::read_source_file(path, text)) text.clear();
  return text;
}

// A side file's text (a consumer file may be far larger than a configuration), "" if it
// cannot be read.
std::string read_side_file(const std::string& path) {
  std::string text;
  if (config::read_bounded_file(path, text, limit::consumer_map::max_bytes, "a file")) text.clear();
  return text;
}

}  // namespace

server::server(std::string path, std::shared_ptr<config::config> cfg) : path_(std::move(path)) {
  layout_.assign(*cfg);
  last_text_hash_ = cfg->hash;
  last_tls_hash_ = files_hash(*cfg);
  // Names are resolved before the first request: the workers start with their addresses.
  dns_.set(cfg->resolver, upstream::server_names(cfg->upstreams),
           [this] { asio::post(reload_ioc_, [this] { names_resolved(); }); });
  std::vector<std::string> errors;
  auto tls = http::tls_contexts::read(*cfg, errors);
  auto consumers = limit::consumer_maps::read(*cfg, errors);
  if (!tls || !consumers) throw std::runtime_error(errors.front());
  warn_unverified(*cfg);
  log_consumers(*consumers);
  rt_ = http::compiled_config::build(std::move(cfg), nullptr, dns_.answers(), std::move(*tls), std::move(*consumers));
}

server::~server() {
  dns_.stop();
  stop_reload_thread();
}

std::shared_ptr<const http::compiled_config> server::current() const {
  std::lock_guard lock(mu_);
  return rt_;
}

config::snapshot server::current_config() const { return current()->cfg; }


std::vector<std::string> server::watched_files(const config::config& cfg) const {
  auto out = side_files(cfg);
  out.insert(out.begin(), path_);
  return out;
}

std::string server::files_hash(const config::config& cfg) {
  std::string all;
  for (const auto& f : side_files(cfg)) all += util::fnv1a_hex(read_side_file(f));
  return all;
}

namespace {
unsigned worker_count(const config::config& cfg) {
  return cfg.workers ? cfg.workers : std::max(1u, std::thread::hardware_concurrency());
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

void server::start_workers(unsigned n, listen_group& plain, listen_group* tls) {
  const auto& cfg = *rt_->cfg;
  access_ = obs::access_log::open(cfg.log);
  memory_ = std::make_unique<store::memory_store>(cfg.memory.max_keys);
  spans_ = std::make_unique<obs::span_exporter>();
  spans_->configure(cfg.tracing.exporter);
  connections_.max = max_connections(cfg, n);
  for (unsigned i = 0; i < n; ++i)
    workers_.push_back(std::make_unique<worker>(i, rt_, access_, memory_.get(), &connections_, spans_.get()));
  for (unsigned i = 0; i < n; ++i) workers_[i]->start(plain.fd(i), tls ? tls->fd(i) : -1);
  workers_running_ = true;
}

bool server::stores_ready() const {
  return std::all_of(workers_.begin(), workers_.end(), [](const auto& w) { return w->store_usable(); });
}

void server::open_when_ready(asio::io_context& main_ioc, listen_group& listener, std::function<void(bool)> opened) {
  const auto wait = rt_->cfg->store == config::store_kind::redis ? rt_->cfg->redis.startup_wait : config::duration(0);
  const auto until = std::chrono::steady_clock::now() + wait;
  auto timer = std::make_shared<asio::steady_timer>(main_ioc);
  // The poll is owned by the handler that will run it next (the post below, then each
  // timer wait), never by itself: when the loop ends with a wait pending (a signal's
  // drain can finish before the next tick), destroying that wait frees it all. (It held
  // itself once, and a drain quicker than 10 ms leaked it: LeakSanitizer in test_startup.)
  auto poll = std::make_shared<std::function<void()>>();
  *poll = [this, &listener, timer, self = std::weak_ptr(poll), until, wait, opened = std::move(opened)] {
    // A signal came first: the drain owns the listener now (closed), nothing to open.
    if (stopping_) return;
    const bool ready = stores_ready();
    if (!ready && std::chrono::steady_clock::now() < until) {
      timer->expires_after(std::chrono::milliseconds(10));
      timer->async_wait([next = self.lock()](const boost::system::error_code& ec) {
        if (!ec && next) (*next)();
      });
      return;
    }
    const auto& cfg = *rt_->cfg;
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_at_);
    if (!ready)
      spdlog::warn("the store is not ready on every worker after redis.startup_wait ({}ms): serving anyway, under each "
                   "route's on_store_error until it is",
                   wait.count());
    else if (cfg.store == config::store_kind::redis)
      spdlog::info("the store is ready on every worker after {}ms", took.count());
    auto ec = listener.listen();
    if (ec) {
      spdlog::error("cannot listen on {}: {}", cfg.listen.str(), ec.message());
      opened(false);
      return;
    }
    if (tls_listener_) {
      if ((ec = tls_listener_->listen())) {
        spdlog::error("cannot listen on tls.listen {}: {}", cfg.tls.listen->str(), ec.message());
        opened(false);
        return;
      }
      spdlog::info("floodgate listening for TLS on {} ({} certificate(s))", cfg.tls.listen->str(),
                   cfg.tls.certificates.size());
    }
    for (auto& w : workers_) w->accept();
    serving_ = true;
    spdlog::info("floodgate listening on {} with {} worker(s), {} route(s), at most {} connections", cfg.listen.str(),
                 workers_.size(), cfg.routes.size(), connections_.max);
    obs::notify_ready(fmt::format("serving on {} ({} worker(s), {} route(s), config hash {})", cfg.listen.str(),
                                  workers_.size(), cfg.routes.size(), cfg.hash));
    opened(true);
  };
  asio::post(main_ioc, [poll] { (*poll)(); });
}

void server::start_reload_thread() {
  reload_work_.emplace(reload_ioc_.get_executor());
  reload_thread_ = std::thread([this] { obs::run_logged(reload_ioc_, "reload"); });
}

void server::stop_reload_thread() {
  // The reload under way finishes; those still queued are dropped.
  reload_work_.reset();
  reload_ioc_.stop();
  if (reload_thread_.joinable()) reload_thread_.join();
}

void server::reload_later(std::string why) {
  asio::post(reload_ioc_, [this, why = std::move(why)] { reload(why); });
}

void server::reload(std::function<void(admin::reload_outcome)> done) {
  asio::post(reload_ioc_, [this, done = std::move(done)] { done(reload("POST /reload")); });
}

void server::on_control_signal(asio::signal_set& control) {
  control.async_wait([this, &control](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    if (sig == SIGHUP) {
      reload_later("SIGHUP");
    } else {
      // (logrotate's postrotate sends it, as for nginx; not waiting for a reload under way)
      std::shared_ptr<obs::access_log> access;
      {
        std::lock_guard lock(mu_);
        access = access_;
      }
      if (access && access->reopen()) spdlog::info("SIGUSR1: the access log file opened again");
    }
    on_control_signal(control);
  });
}

int server::run() {
  const auto& cfg = *rt_->cfg;
  asio::io_context main_ioc;
  // (a context that never runs: workers accept on copies; in main_ioc, each connection would wake this thread)
  asio::io_context listeners_ioc;
  const unsigned workers = worker_count(cfg);
  listen_group listener(listeners_ioc), tls_listener(listeners_ioc);
  if (!listener.bind(cfg.listen, workers, "listen")) return 1;
  if (cfg.tls.listen) {
    if (!tls_listener.bind(*cfg.tls.listen, workers, "tls.listen")) return 1;
    tls_listener_ = &tls_listener;
  }
  // The admin listener (admin.listen) on a thread of its own, bound before any worker runs.
  std::optional<admin::listener> admin_listener;
  if (cfg.admin.listen) {
    admin_listener.emplace(*this);
    if (auto ec = admin_listener->listen(*cfg.admin.listen)) {
      spdlog::error("cannot listen on admin.listen {}: {}", cfg.admin.listen->str(), ec.message());
      return 1;
    }
  }
  // Ours before any worker starts (a SIGTERM then drains; one before run() waits in the set).
  // SIGHUP reloads (the file is watched too); SIGUSR1 opens the access log file again.
  hold_signals_for_good();
  asio::signal_set signals(main_ioc, SIGTERM, SIGINT);
  int signal_number = 0;
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (!ec) signal_number = sig;
    main_ioc.stop();
  });
  asio::signal_set control(main_ioc, SIGHUP, SIGUSR1);
  on_control_signal(control);
  started_at_ = std::chrono::steady_clock::now();
  start_reload_thread();
  start_workers(workers, listener, tls_listener_);
  // (under the reload lock: a publish meanwhile, a reload's or a name's, updates it itself)
  with_reload_lock([&] { checker_.update(current()->servers); });
  if (admin_listener) {
    // /limits reads the store on the admin's own thread and connection.
    admin_listener->set_inspector(
        std::make_unique<store::store_inspector>(admin_listener->executor(), *memory_, cfg));
    admin_listener->start();
    spdlog::info("admin listening on {}", cfg.admin.listen->str());
  }

  config_watch watch(main_ioc, [this] { return watched_files(*current_config()); },
                     [this] { asio::post(reload_ioc_, [this] { file_changed(); }); });

  int exit_code = 0;
  open_when_ready(main_ioc, listener, [&](bool ok) {
    if (ok) return;
    exit_code = 1;
    main_ioc.stop();
  });
  main_ioc.run();
  stopping_ = true;
  main_ioc.restart();
  if (exit_code) {
    signal_number = 0;
  } else {
    spdlog::info("signal {}: draining (up to {}ms)", signal_number, current_config()->http.drain_timeout.count());
    obs::notify_stopping(fmt::format("draining (up to {} ms)", current_config()->http.drain_timeout.count()));
  }
  listener.close();
  tls_listener.close();
  tls_listener_ = nullptr;
  control.cancel();
  watch.close();
  // Before the admin goes: a reload it waits for answers it on its io_context.
  dns_.stop();
  stop_reload_thread();
  checker_.stop();
  // Draining is not serving: the admin listener goes first (its thread joins, its
  // connections close).
  admin_listener.reset();
  const int drained = drain(main_ioc, signals);
  ignore_signals_from_now({&signals, &control});
  return exit_code ? exit_code : drained;
}

int server::drain(asio::io_context& main_ioc, asio::signal_set& signals) {
  {
    // No reload from here on (one waiting for the workers ends first).
    std::lock_guard lock(reload_mu_);
    workers_running_ = false;
  }
  for (auto& w : workers_) w->drain();
  // Workers return from run() once their last connection ends; the timer bounds the wait.
  std::atomic<unsigned> done{0};
  std::vector<std::thread> joiners;
  for (auto& w : workers_)
    joiners.emplace_back([&, wp = w.get()] {
      wp->join();
      if (++done == workers_.size()) asio::post(main_ioc, [&] { main_ioc.stop(); });
    });
  asio::steady_timer deadline(main_ioc, current_config()->http.drain_timeout);
  deadline.async_wait([&](const boost::system::error_code& ec) {
    if (ec) return;
    spdlog::warn("drain timeout: closing remaining connections");
    for (auto& w : workers_) w->stop();
  });
  // A second signal stops at once.
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec) for (auto& w : workers_) w->stop();
  });
  main_ioc.run();
  for (auto& t : joiners) t.join();
  workers_.clear();
  spdlog::info("drained; exiting");
  return 0;
}

std::vector<std::string> server::keep_restart_only(config::config& next, const config::config& was) const {
  std::vector<std::string> kept;
  auto keep = [&](auto& now, const auto& before, const char* name) {
    if (now == before) return;
    now = before;
    kept.emplace_back(name);
  };
  keep(next.listen, was.listen, "listen");
  keep(next.workers, was.workers, "workers");
  keep(next.admin.listen, was.admin.listen, "admin.listen");
  keep(next.memory.max_keys, was.memory.max_keys, "memory.max_keys");
  keep(next.http.max_connections, was.http.max_connections, "http.max_connections");
  keep(next.tls.listen, was.tls.listen, "tls.listen");
  return kept;
}

// A limit whose algorithm changed under the same name finds its keys holding the other
// algorithm's state (until they expire): said, so that the operator renames it.
static void warn_changed_algorithms(const config::config& next, const config::config& was, std::string_view why) {
  for (const auto& r : next.routes)
    for (const auto& l : r.limits)
      for (const auto& old_route : was.routes)
        if (old_route.name == r.name)
          for (const auto& old : old_route.limits)
            if (old.name == l.name && old.algo != l.algo)
              spdlog::warn("reload ({}): limit {}/{} changed from {} to {}: its keys keep the old algorithm's state "
                           "until they expire; give the limit a new name to start afresh",
                           why, r.name, l.name, admin::algorithm_name(old.algo), admin::algorithm_name(l.algo));
}

admin::reload_outcome server::reload(std::string_view why) {
  // The service manager hears of it (systemctl reload waits on it), with how it ended.
  // (only while serving: a reload during the start or the drain must not say READY)
  const bool announce = serving_ && !stopping_;
  if (announce) obs::notify_reloading();
  auto out = reload_now(why);
  const auto cfg = current_config();
  if (announce && serving_ && !stopping_)
    obs::notify_ready(out.ok ? fmt::format("serving (reloaded, config hash {})", cfg->hash)
                             : fmt::format("serving the previous configuration (hash {}): the reload was refused, {} "
                                           "error(s)",
                                           cfg->hash, out.errors.size()));
  return out;
}

admin::reload_outcome server::reload_now(std::string_view why) {
  std::lock_guard serial(reload_mu_);
  admin::reload_outcome out;
  auto loaded = config::load_file(path_);
  if (!loaded.ok()) {
    for (const auto& e : loaded.errors) out.errors.push_back(e.str());
    if (loaded.errors.empty()) out.errors.push_back(path_ + ": cannot be loaded");
    for (const auto& e : out.errors) spdlog::error("reload ({}): {}", why, e);
    spdlog::error("reload ({}): {} error(s) in {}: the configuration in effect is unchanged", why, out.errors.size(),
                  path_);
    last_text_hash_ = util::fnv1a_hex(read_file(path_));
    last_tls_hash_ = files_hash(*current_config());
    reloads_failed_.fetch_add(1, std::memory_order_relaxed);
    return out;
  }
  auto next = loaded.cfg;
  last_text_hash_ = next->hash;
  last_tls_hash_ = files_hash(*next);
  const auto was = current();
  out.restart_needed = keep_restart_only(*next, *was->cfg);
  // The certificates are read again at every reload (a renewed one comes in with it);
  // one that cannot be used fails the reload as a bad file would.
  auto tls = http::tls_contexts::read(*next, out.errors);
  auto consumers = limit::consumer_maps::read(*next, out.errors);
  if (!tls || !consumers) {
    out.restart_needed.clear();
    for (const auto& e : out.errors) spdlog::error("reload ({}): {}", why, e);
    spdlog::error("reload ({}): the configuration in effect is unchanged", why);
    reloads_failed_.fetch_add(1, std::memory_order_relaxed);
    return out;
  }
  warn_unverified(*next);
  log_consumers(*consumers);
  warn_changed_algorithms(*next, *was->cfg, why);
  for (const auto& k : out.restart_needed)
    spdlog::warn("reload ({}): {} changed: it takes effect at the next restart (the old value stays)", why, k);
  layout_.assign(*next);
  if (next->log.level != was->cfg->log.level) spdlog::set_level(spdlog::level::from_str(next->log.level));
  auto access = next->log == was->cfg->log ? access_ : obs::access_log::open(next->log);
  dns_.set(next->resolver, upstream::server_names(next->upstreams), {});
  if (spans_) spans_->configure(next->tracing.exporter);
  publish(http::compiled_config::build(next, was.get(), dns_.answers(), std::move(*tls), std::move(*consumers)), access,
          why);
  reloads_ok_.fetch_add(1, std::memory_order_relaxed);
  out.ok = true;
  out.hash = next->hash;
  spdlog::info("reload ({}): {} loaded (hash {}), {} route(s)", why, path_, next->hash, next->routes.size());
  return out;
}

void server::publish(std::shared_ptr<const http::compiled_config> rt, std::shared_ptr<obs::access_log> access,
                     std::string_view why) {
  if (workers_running_) {
    // Every worker takes it before the answer: a request sent after it sees the new one.
    struct acks {
      std::mutex m;
      std::condition_variable cv;
      std::size_t n = 0;
    };
    auto applied = std::make_shared<acks>();
    for (auto& w : workers_)
      w->update(rt, access, [applied] {
        std::lock_guard l(applied->m);
        ++applied->n;
        applied->cv.notify_one();
      });
    std::unique_lock l(applied->m);
    if (!applied->cv.wait_for(l, std::chrono::seconds(5), [&] { return applied->n == workers_.size(); }))
      spdlog::warn("reload ({}): {} of {} worker(s) took the new configuration within 5 s", why, applied->n,
                   workers_.size());
  }
  {
    std::lock_guard lock(mu_);
    rt_ = rt;
    access_ = std::move(access);
  }
  if (workers_running_) checker_.update(rt->servers);
}

void server::names_resolved() {
  std::lock_guard serial(reload_mu_);
  const auto was = current();
  std::shared_ptr<obs::access_log> access;
  {
    std::lock_guard lock(mu_);
    access = access_;
  }
  auto rt = http::compiled_config::build(was->cfg, was.get(), dns_.answers(), was->tls, was->consumers);
  std::size_t before = 0, after = 0;
  for (const auto& u : was->upstreams) before += u.servers.size();
  for (const auto& u : rt->upstreams) after += u.servers.size();
  publish(std::move(rt), std::move(access), "names resolved");
  spdlog::info("upstream servers changed with their names' addresses: {} server(s), {} before", after, before);
}

void server::file_changed() {
  {
    std::lock_guard serial(reload_mu_);
    if (util::fnv1a_hex(read_file(path_)) == last_text_hash_ && files_hash(*current_config()) == last_tls_hash_)
      return;
  }
  reload("file changed");
}

}  // namespace fg::app
