#pragma once
#include <cstdint>

namespace fg::redis {

// How a reply to a command in flight reads, for command_fsm.
enum class reply_kind : std::uint8_t {
  lost,      // no reply: the connection went away (hiredis calls back with none)
  noscript,  // an error reply starting with NOSCRIPT
  other,     // any other reply, errors included
};

enum class reply_action : std::uint8_t {
  deliver,    // hand the reply to the caller
  fail_lost,  // fail the caller with errc::disconnected
  send_eval,  // send the script with EVAL (same arguments, a fresh deadline) instead
  discard,    // the caller already had its answer (timeout): drop the reply
};

// One command in flight, from sent to its reply, with no I/O: its deadline may pass
// first (the caller gets a timeout, the late reply is dropped), and an EVALSHA of our
// script that meets NOSCRIPT (flushed, or a new server) is sent again as EVAL, once.
// Never retried after a timeout: the script may have run.
class command_fsm {
 public:
  enum class stage : std::uint8_t { plain, evalsha, eval };
  constexpr explicit command_fsm(stage s = stage::plain) : stage_(s) {}

  // The deadline passed with no reply: true if the caller is to get a timeout now.
  bool on_deadline() {
    if (timed_out_) return false;
    timed_out_ = true;
    return true;
  }

  // The reply came (or will never come: lost); `can_send` if the connection can take
  // a command now.
  reply_action on_reply(reply_kind r, bool can_send) {
    if (timed_out_) return reply_action::discard;
    if (r == reply_kind::lost) return reply_action::fail_lost;
    if (r == reply_kind::noscript && stage_ == stage::evalsha && can_send) {
      stage_ = stage::eval;
      return reply_action::send_eval;
    }
    return reply_action::deliver;
  }

  bool timed_out() const { return timed_out_; }
  stage current() const { return stage_; }

 private:
  stage stage_;
  bool timed_out_ = false;
};

}  // namespace fg::redis
