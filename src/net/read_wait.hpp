#pragma once
// The next read of a socket that cannot have input yet waits for readiness at once,
// without first trying a read that would find nothing.
//
// Asio's epoll reactor tries every read once on the spot ("speculatively") while the
// socket has not been seen drained; it stops only after a read of zero bytes (the
// end). A read of an upstream's response, started right after the request went out,
// always finds nothing (the upstream cannot have answered yet): a recv system call
// returning EAGAIN per request, about 1 µs here (bench/profile.py syscalls). Marking
// the socket drained instead queues the read, with no system call: the socket is
// registered for input edge-triggered from the start, and the edge of the answer's
// arrival performs the read (and marks it undrained again).
//
// Call it only when the socket is known to hold nothing and no edge for input has been
// handled since that was found (a look with MSG_PEEK that found nothing, with no turn of
// the loop between it and here): input that arrives afterwards raises a new edge, which
// the reactor reports whether or not a read is waiting, and which makes the next read
// try at once again. Where the look is older, an edge already handled would be lost, and
// the read would wait for input that is already there.
//
// Only the socket's own thread may call it (the descriptor's state is not locked: each
// worker's sockets are touched by its thread alone). Where Asio does not use its epoll
// reactor (another Boost than the one this was written against), it does nothing.
#include <boost/asio/ip/tcp.hpp>

namespace fg::net {

void read_waits_for_input(boost::asio::ip::tcp::socket& s);

// Whether the next read of `s` would first be tried on the spot (tests).
bool read_tries_first(boost::asio::ip::tcp::socket& s);

}  // namespace fg::net
