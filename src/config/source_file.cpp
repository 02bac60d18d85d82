#include "config/source_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "config/caps.hpp"

namespace fg::config {

namespace {

// Closes the descriptor however the read ends.
struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

diagnostic problem(const std::string& path, std::string message) { return {path, 0, 0, std::move(message)}; }

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::optional<diagnostic> read_source_file(const std::string& path, std::string& text) {
  return read_bounded_file(path, text, caps::file_bytes, "a configuration");
}

std::optional<diagnostic> read_bounded_file(const std::string& path, std::string& text, std::uint64_t max_bytes,
                                            std::string_view what) {
  text.clear();
  // O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one.
  fd_closer f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) return problem(path, std::string("cannot open file: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return problem(path, std::string("cannot read file: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return problem(path, std::string("is ") + kind_of(st.st_mode) + ", not a regular file: " + std::string(what) +
                             " must be one");
  const auto too_big = [&](std::uint64_t size) {
    return problem(path, "is " + std::to_string(size) + " bytes or more; " + std::string(what) + " is at most " +
                             std::to_string(max_bytes) + " bytes (" + std::to_string(max_bytes >> 20) + " MiB)");
  };
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) return too_big(static_cast<std::uint64_t>(st.st_size));
  text.resize(static_cast<std::size_t>(st.st_size) + 1);
  std::size_t got = 0;
  for (;;) {
    if (got == text.size()) {
      // Grown since fstat: read on, but never past the cap.
      if (text.size() > max_bytes) return too_big(text.size());
      text.resize(std::min<std::size_t>(text.size() * 2, max_bytes + 1));
    }
    auto n = ::read(f.fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return problem(path, std::string("cannot read file: ") + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  return std::nullopt;
}

}  // namespace fg::config
