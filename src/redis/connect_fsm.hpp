#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "redis/backoff.hpp"

namespace fg::redis {

// The commands queued on every new connection before anything else (pipelined: they
// go out first once connected, and nothing can overtake them).
enum class setup_step : std::uint8_t { auth, select, script_load };
const char* name(setup_step s);
struct setup_command {
  setup_step step;
  std::vector<std::string> args;
};
// AUTH (with the ACL user, if any) when there is a password, SELECT when the database
// is not 0, then SCRIPT LOAD of `script`.
std::vector<setup_command> setup_commands(const config::redis_config& cfg, const std::string& script);

enum class setup_result : std::uint8_t { ok, error_reply, no_reply };

enum class connect_action_type : std::uint8_t {
  none,          // nothing to do
  connect,       // resolve and connect to the topology's address, queue the setup commands
  wait,          // log `why`, tell the topology, try again after `delay`
  ready,         // user commands may go; log "connected" (or "connected again", `again`)
  setup_failed,  // log that setup command `why` failed; the connection stays up
  close,         // free the context: hiredis fails what is pending with no reply
};

struct connect_action {
  connect_action_type type = connect_action_type::none;
  std::chrono::milliseconds delay{0};
  const char* why = nullptr;
  bool again = false;
};

// When to connect, when the connection is usable and when to try again, with no I/O:
// the connection feeds it what happened and does what it answers. Losses and failures
// wait a jittered, growing, capped delay (backoff), reset by the first answer on a
// connection (on_answered; a connect alone proves little: a hung server's kernel still
// accepts). A failed setup command (wrong password, no such database) is logged and the
// connection kept: its commands then fail with Redis' own error, which callers report.
class connect_fsm {
 public:
  enum class state : std::uint8_t { idle, connecting, ready, waiting, stopped };
  explicit connect_fsm(backoff b = {}) : backoff_(b) {}

  connect_action start();
  // The TCP connection is up (hiredis' connect callback, status OK).
  connect_action on_connected();
  // The server answered on this connection: the backoff starts again from its base.
  void on_answered() { backoff_.reset(); }
  // No connection: the name did not resolve, or hiredis could not connect.
  connect_action on_connect_failed(const char* why, double random01);
  // An established connection went away.
  connect_action on_lost(const char* why, double random01);
  // The wait asked for by a `wait` action is over.
  connect_action on_timer();
  // What a reply to a setup command calls for (it needs no state: a static).
  static connect_action on_setup_reply(setup_step step, setup_result r);
  connect_action stop();

  state current() const { return state_; }
  bool ready() const { return state_ == state::ready; }
  // Failed attempts since the last successful connect.
  unsigned attempts() const { return backoff_.attempts(); }

 private:
  connect_action wait(const char* why, double random01);

  state state_ = state::idle;
  backoff backoff_;
};

}  // namespace fg::redis
