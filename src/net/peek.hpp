#pragma once
// What a connected socket holds for reading, looked at without taking it or waiting:
// bytes, nothing yet, or its end (the peer's FIN, or an error such as a reset).
#include <sys/socket.h>

#include <cerrno>

namespace fg::net {

enum class pending_input { bytes, nothing, end };

inline pending_input peek_input(int fd) {
  char probe;
  const auto n = ::recv(fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return pending_input::bytes;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return pending_input::nothing;
  return pending_input::end;
}

}  // namespace fg::net
