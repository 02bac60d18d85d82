#pragma once
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <functional>
#include <string>

namespace fg::app {

// Calls `changed` when the configuration file may have changed on disk: inotify on its
// folder (and on the folder its symlinks lead to), so an edit in place (close after
// write), an editor's new file renamed over it, and a Kubernetes ConfigMap volume's
// swap of its `..data` symlink are all seen. Events are gathered for 100 ms first (one
// call per burst); the caller compares the text with what it loaded. No inotify (an
// error is logged): SIGHUP and POST /reload still reload.
class config_watch {
 public:
  config_watch(boost::asio::io_context& ioc, std::string path, std::function<void()> changed);
  ~config_watch();
  void close();

 private:
  void watch_folders();
  void read();
  void settle();

  std::string path_;
  std::function<void()> changed_;
  boost::asio::posix::stream_descriptor fd_;
  boost::asio::steady_timer settle_;
  bool settling_ = false;
  std::array<char, 4096> buf_{};
};

}  // namespace fg::app
