#pragma once
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <mutex>
#include <string>
#include <vector>

#include "admin/status.hpp"
#include "app/listen_group.hpp"
#include "app/worker.hpp"
#include "http/compiled_config.hpp"
#include "obs/metrics.hpp"
#include "upstream/dns.hpp"
#include "upstream/health_checker.hpp"

namespace fg::app {

// http.max_connections, or (0) what the descriptor limit allows, after raising the soft
// limit to the hard one.
std::size_t max_connections(const config::config& cfg, unsigned workers);

// The listening socket and N workers; runs until SIGTERM/SIGINT, then drains. Reloads
// its configuration file on SIGHUP, on the admin's POST /reload and when the file
// changes on disk. What the admin listener sees of the process (status_source), over
// thread-safe state only.
class server final : public admin::status_source {
 public:
  // `cfg` was loaded from `path` without errors.
  server(std::string path, std::shared_ptr<config::config> cfg);
  ~server() override;
  // Blocks until a stop signal and the drain are done. Returns the exit code.
  int run();

  // Loads the file again and, if it is valid, swaps it in on every worker (any thread;
  // one reload at a time). `why` goes in the log lines.
  admin::reload_outcome reload(std::string_view why);

  // The file changed on disk (the watcher): reloads if its text differs from the last
  // text loaded or tried.
  void file_changed();

  config::snapshot current_config() const override;
  std::shared_ptr<const limit::consumer_maps> consumers() const override {
    auto rt = current();
    return {rt, &rt->consumers};
  }
  std::shared_ptr<const upstream::server_set> upstream_servers() const override;
  // Cluster mode: each master serving slots, and how many workers are connected to it.
  std::vector<std::pair<std::string, std::size_t>> cluster_masters() const;
  admin::readiness ready() const override;
  std::string metrics() const override;
  // On the reload thread; `done` runs there.
  void reload(std::function<void(admin::reload_outcome)> done) override;

 private:
  // Reloads run here, one at a time, away from the signal thread (which must stay free
  // for SIGTERM) and from the admin's (which answers probes).
  void reload_later(std::string why);
  void start_reload_thread();
  void stop_reload_thread();
  // Until every worker's store is ready or redis.startup_wait has passed (logged either
  // way), the proxy port is bound but does not listen; then it listens and the workers
  // accept. `opened` runs on the main thread once it does.
  void open_when_ready(boost::asio::io_context& main_ioc, listen_group& listener, std::function<void(bool)> opened);
  bool stores_ready() const;
  std::shared_ptr<const http::compiled_config> current() const;
  // listen, workers, admin.listen, memory.max_keys and http.max_connections stay as
  // they are until a restart: logged, and kept in `next`.
  std::vector<std::string> keep_restart_only(config::config& next, const config::config& was) const;
  // Worker i accepts on socket i of each group.
  void start_workers(unsigned n, listen_group& plain, listen_group* tls);
  // Swaps `rt` in: every worker takes it (before this returns, or 5 s), then the admin
  // and the health checks see it. Under reload_mu_.
  void publish(std::shared_ptr<const http::compiled_config> rt, std::shared_ptr<obs::access_log> access,
               std::string_view why);
  // On the reload thread: a server name's addresses changed, so the configuration in
  // effect is built again with them (its servers' health and pools kept by address).
  void names_resolved();
  int drain(boost::asio::io_context& main_ioc, boost::asio::signal_set& signals);
  // SIGHUP reloads, SIGUSR1 opens the access log file again; armed again after each.
  void on_control_signal(boost::asio::signal_set& control);
  // The reload itself (reload() tells the service manager around it).
  admin::reload_outcome reload_now(std::string_view why);

  const std::string path_;
  mutable std::mutex mu_;  // rt_ and access_ (read by the admin thread); one reload at a time
  std::mutex reload_mu_;
  template <class F>
  void with_reload_lock(F f) {
    std::lock_guard serial(reload_mu_);
    f();
  }
  std::shared_ptr<const http::compiled_config> rt_;
  std::shared_ptr<obs::access_log> access_;
  std::string last_text_hash_;  // of the text last loaded or tried (reload_mu_)
  std::string last_tls_hash_;   // of the TLS files it named, as they were then (reload_mu_)
  // What the file watcher watches: the configuration file and the TLS files `cfg` names.
  std::vector<std::string> watched_files(const config::config& cfg) const;
  // The TLS files' contents, hashed (a renewed certificate changes it).
  static std::string files_hash(const config::config& cfg);
  obs::metrics_layout layout_;  // reload_mu_
  std::atomic<std::uint64_t> reloads_ok_{0}, reloads_failed_{0};
  std::unique_ptr<store::memory_store> memory_;
  // tracing.export's thread and queue (configured at start and at each reload; after
  // the workers, which hand it spans, are gone).
  std::unique_ptr<obs::span_exporter> spans_;
  http::connection_limit connections_;
  std::vector<std::unique_ptr<worker>> workers_;
  // Active health checks, from run() to the drain; told of each reload's servers.
  upstream::health_checker checker_;
  std::atomic<bool> workers_running_{false};
  // The TLS listener (tls.listen) while run() has one: opened with the proxy port.
  listen_group* tls_listener_ = nullptr;
  // The proxy port listens (startup is over).
  std::atomic<bool> serving_{false};
  // run()'s loop has ended (a signal, or a failed start): the start-up wait gives up.
  std::atomic<bool> stopping_{false};
  std::chrono::steady_clock::time_point started_at_{};
  boost::asio::io_context reload_ioc_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> reload_work_;
  std::thread reload_thread_;
  // Keeps the upstream servers' names resolved (after reload_ioc_, which it posts to:
  // stopped first).
  upstream::dns_refresher dns_;
};

}  // namespace fg::app
