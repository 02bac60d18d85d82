#pragma once
// A bound on what waits in the kernel, written to a TCP socket and not yet sent.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

namespace fg::net {

// At most this much of what we wrote to a peer and it has not taken yet waits in the
// kernel (TCP_NOTSENT_LOWAT), on every client and upstream socket. Without the bound, a
// peer that reads slowly lets the kernel's send buffer grow to tcp_wmem's maximum
// (4 MiB), held for as long as the peer takes to read it, and the socket shows room
// again only once a third of that has drained: a write whose deadline ran while a peer
// read steadily but slower than that timed out. With it, the socket shows room as soon
// as the peer has taken half of what waits, so each write to a peer that keeps reading
// moves on, and a slow reader holds little kernel memory. The price: more wake-ups on a
// fast bulk transfer (a 1 GiB download over loopback cost 5-10% more CPU).
inline constexpr int unsent_bound = 128 * 1024;

inline void bound_unsent(int fd) {
  const int v = unsent_bound;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, sizeof v);
}

}  // namespace fg::net
