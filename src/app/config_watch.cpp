#include "app/config_watch.hpp"

#include <spdlog/spdlog.h>

#include <sys/inotify.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace fg::app {

namespace fs = std::filesystem;

config_watch::config_watch(boost::asio::io_context& ioc, std::function<std::vector<std::string>()> paths,
                           std::function<void()> changed)
    : paths_(std::move(paths)), changed_(std::move(changed)), fd_(ioc), settle_(ioc) {
  int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    spdlog::warn("cannot watch {} for changes (inotify: {}): reload with SIGHUP or POST /reload", paths_().front(),
                 std::strerror(errno));
    return;
  }
  fd_.assign(fd);
  watch_folders();
  read();
}

config_watch::~config_watch() { close(); }

void config_watch::close() {
  boost::system::error_code ec;
  settle_.cancel();
  if (fd_.is_open()) fd_.close(ec);
}

void config_watch::watch_folders() {
  // Each file's own folder, and each folder a symlink on the way leads to (a ConfigMap:
  // floodgate.yaml -> ..data/floodgate.yaml, ..data -> ..2026_12_01_...). Watching a
  // folder twice is harmless (inotify gives the same watch back).
  constexpr std::uint32_t mask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE_SELF | IN_MOVE_SELF;
  for (const auto& path : paths_()) {
    std::error_code ec;
    fs::path p = fs::absolute(path, ec);
    for (int hops = 0; hops < 8 && !ec; ++hops) {
      (void)::inotify_add_watch(fd_.native_handle(), p.parent_path().c_str(), mask);
      if (!fs::is_symlink(p, ec)) break;
      auto target = fs::read_symlink(p, ec);
      p = target.is_absolute() ? target : p.parent_path() / target;
    }
    auto real = fs::canonical(path, ec);
    if (!ec) (void)::inotify_add_watch(fd_.native_handle(), real.parent_path().c_str(), mask);
  }
}

void config_watch::read() {
  fd_.async_read_some(boost::asio::buffer(buf_), [this](const boost::system::error_code& ec, std::size_t) {
    if (ec) return;  // closed
    // Which file changed does not matter: the text is compared once things settle.
    if (!settling_) {
      settling_ = true;
      settle_.expires_after(std::chrono::milliseconds(100));
      settle_.async_wait([this](const boost::system::error_code& e) {
        settling_ = false;
        if (!e) settle();
      });
    }
    read();
  });
}

void config_watch::settle() {
  watch_folders();  // a ConfigMap's new timestamped folder
  changed_();
}

}  // namespace fg::app
