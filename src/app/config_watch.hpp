#pragma once
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <functional>
#include <string>
#include <vector>

namespace fg::app {

// Calls `changed` when the configuration file, or another file it names (`paths()`: the
// configuration file first, then the TLS certificates and keys), may have changed on
// disk: inotify on each one's folder (and on the folder its symlinks lead to), so an edit in place (close after
// write), an editor's new file renamed over it, and a Kubernetes ConfigMap volume's
// swap of its `..data` symlink are all seen. Events are gathered for 100 ms first (one
// call per burst); the caller compares the text with what it loaded. No inotify (an
// error is logged): SIGHUP and POST /reload still reload.
class config_watch {
 public:
  // `paths` is asked again at every change (a reload may name other files).
  config_watch(boost::asio::io_context& ioc, std::function<std::vector<std::string>()> paths,
               std::function<void()> changed);
  ~config_watch();
  void close();

 private:
  void watch_folders();
  void read();
  void settle();

  std::function<std::vector<std::string>()> paths_;
  std::function<void()> changed_;
  boost::asio::posix::stream_descriptor fd_;
  boost::asio::steady_timer settle_;
  bool settling_ = false;
  std::array<char, 4096> buf_{};
};

}  // namespace fg::app
