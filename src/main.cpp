#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <iostream>

#include "admin/health_check_client.hpp"
#include "http/tls.hpp"
#include "limit/consumers.hpp"
#include "app/server.hpp"
#include "config/loader.hpp"
#include "fg_version.hpp"
#include "obs/logging.hpp"

namespace po = boost::program_options;

// jemalloc's options, read at its start (ignored by other allocators): a background
// thread returns freed pages to the system within a few seconds even when the process
// is idle (without it, purging only happens during allocations), so memory taken by a
// burst of connections goes back once they close. MALLOC_CONF overrides.
extern "C" {
__attribute__((used)) const char* malloc_conf = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0";
}

namespace {
// Descriptors 0-2 left closed by whoever started the process would go to the first files
// and sockets it opens, and the log (stdout) would then write into a client's
// connection: /dev/null holds the numbers instead. False if that cannot be done.
bool hold_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    const int held = ::open("/dev/null", O_RDWR);  // (the lowest free number: this one)
    if (held != fd) {
      if (held >= 0) ::close(held);
      return false;
    }
  }
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  if (!hold_standard_descriptors()) return 1;
  // OpenSSL writes to its sockets itself (write(2), not send with MSG_NOSIGNAL): a peer
  // gone must be an EPIPE for that one connection, never the end of the process.
  std::signal(SIGPIPE, SIG_IGN);
  // SIGUSR1 (logrotate's postrotate) ends a process by default: ignored until the server
  // handles it (it opens the access log again), so a rotation during the start is harmless.
  std::signal(SIGUSR1, SIG_IGN);
  po::options_description opts("floodgate — a rate-limiting HTTP reverse proxy\n\nUsage: floodgate [--check | --reload] --config FILE\n       floodgate --health-check URL\n\nOptions");
  opts.add_options()
      ("config,c", po::value<std::string>()->default_value("config/floodgate.yaml"), "configuration file")
      ("health-check", po::value<std::string>()->value_name("URL"),
       "GET URL (http://host:port/path, 3 s at most) and exit: 0 on a 2xx answer, 1 otherwise (the image's HEALTHCHECK)")
      ("check", "validate the configuration and exit (0: valid, 1: errors printed as FILE:LINE:COL: message)")
      ("reload", "ask the running gateway (admin.listen of the configuration, admin.token) to load its file again, "
                 "and wait: exit 0 when applied, 1 when refused or not asked (a unit's ExecReload)")
      ("version,v", "print the version and exit")
      ("help,h", "print this help and exit");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << "floodgate: " << e.what() << "\n" << opts << "\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  if (vm.count("version")) {
    std::cout << "floodgate " << FG_VERSION << "\n";
    return 0;
  }
  if (vm.count("health-check")) return fg::admin::run_health_check(vm["health-check"].as<std::string>());
  auto path = vm["config"].as<std::string>();
  auto loaded = fg::config::load_file(path);
  if (!loaded.ok()) {
    for (const auto& e : loaded.errors) std::cerr << e.str() << "\n";
    std::cerr << "floodgate: " << loaded.errors.size() << " error(s) in " << path << "\n";
    return 1;
  }
  {
    // The certificates, keys, CA bundles and consumer files are read as a start would read them.
    std::vector<std::string> errors;
    const bool tls_ok = fg::http::tls_contexts::read(*loaded.cfg, errors).has_value();
    const bool consumers_ok = fg::limit::consumer_maps::read(*loaded.cfg, errors).has_value();
    if (!tls_ok || !consumers_ok) {
      for (const auto& e : errors) std::cerr << e << "\n";
      std::cerr << "floodgate: " << errors.size() << " error(s) in " << path << "\n";
      return 1;
    }
  }
  if (vm.count("check")) {
    std::cout << path << ": OK\n";
    return 0;
  }
  if (vm.count("reload")) return fg::admin::run_reload(*loaded.cfg);
  fg::obs::init_logging(loaded.cfg->log.level);
  try {
    fg::app::server srv(path, loaded.cfg);
    return srv.run();
  } catch (const std::exception& e) {
    spdlog::error("fatal: {}", e.what());
    return 1;
  }
}
