/* An LD_PRELOAD shim that refuses io_uring as a container runtime's default seccomp
 * profile does (Docker 25 and later: io_uring_setup fails with EPERM): floodgate's
 * liburing call io_uring_queue_init answers -EPERM, and its writes take the path
 * without a ring. bench.py builds and preloads it when FG_IO_URING=off. */
#include <errno.h>

struct io_uring;

int io_uring_queue_init(unsigned entries, struct io_uring *ring, unsigned flags) {
  (void)entries;
  (void)ring;
  (void)flags;
  return -EPERM;
}
