#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>

namespace fg::redis {

// Whether a connection still answers, with no I/O. A command's deadline only tells its
// caller; a connection whose peer stopped answering (a hung server, a middlebox that
// dropped the flow, a black hole that acknowledges and never replies) would keep every
// later command waiting for its deadline forever. The connection feeds this what it
// sent and when input arrived, and asks it, on a tick, what to do:
// - `probe`: nothing was awaited or received for `probe_every`: send a PING (or, on a
//   subscriber, SUBSCRIBE again), so that an idle connection is checked too;
// - `close`: something has been awaited for `stall_after` with no input byte since
//   (or since it was sent), or a connect has not completed in that time: close the
//   connection and make a new one (with the reconnect backoff).
// A merely slow server still sends bytes and is kept; its commands time out one by one.
class liveness {
 public:
  using clock = std::chrono::steady_clock;
  using duration = std::chrono::milliseconds;
  enum class action : std::uint8_t { none, probe, close };

  liveness(duration probe_every, duration stall_after) : probe_every_(probe_every), stall_after_(stall_after) {}

  // A connect began: it has `stall_after` to complete.
  void on_connecting(clock::time_point now) {
    connecting_ = true;
    progress_ = now;
  }
  // Connected: the clocks start now.
  void on_ready(clock::time_point now) {
    connecting_ = false;
    progress_ = now;
  }
  // Something that awaits an answer is sent; `was_awaiting`: something already was.
  void on_sent(clock::time_point now, bool was_awaiting) {
    if (!was_awaiting) progress_ = std::max(progress_, now);
  }
  // Input arrived (a reply byte, or a whole reply).
  void on_input(clock::time_point now) { progress_ = std::max(progress_, now); }

  // What to do at `now`; `awaiting`: a command or probe sent has no reply yet.
  action on_tick(clock::time_point now, bool awaiting) const {
    const auto quiet = now - progress_;
    if (connecting_ || awaiting) return quiet >= stall_after_ ? action::close : action::none;
    return quiet >= probe_every_ ? action::probe : action::none;
  }
  // How long since the last progress (for the log line of a close).
  clock::duration quiet(clock::time_point now) const { return now - progress_; }
  // How often to tick: often enough that a close comes within half a period of its due
  // time, rarely enough to cost nothing.
  duration period() const { return std::max(duration(50), std::min(probe_every_, stall_after_) / 2); }
  duration stall_after() const { return stall_after_; }

 private:
  duration probe_every_, stall_after_;
  clock::time_point progress_{};
  bool connecting_ = false;
};

}  // namespace fg::redis
