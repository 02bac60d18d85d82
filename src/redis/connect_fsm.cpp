#include "redis/connect_fsm.hpp"

namespace fg::redis {

const char* name(setup_step s) {
  switch (s) {
    case setup_step::auth: return "AUTH";
    case setup_step::select: return "SELECT";
    case setup_step::script_load: return "SCRIPT LOAD";
  }
  return "setup";
}

std::vector<setup_command> setup_commands(const config::redis_config& cfg, const std::string& script) {
  std::vector<setup_command> out;
  if (!cfg.password.empty()) {
    if (cfg.username.empty()) out.push_back({setup_step::auth, {"AUTH", cfg.password}});
    else out.push_back({setup_step::auth, {"AUTH", cfg.username, cfg.password}});
  }
  if (cfg.database != 0) out.push_back({setup_step::select, {"SELECT", std::to_string(cfg.database)}});
  if (!script.empty()) out.push_back({setup_step::script_load, {"SCRIPT", "LOAD", script}});
  return out;
}

connect_action connect_fsm::start() {
  if (state_ != state::idle) return {};
  state_ = state::connecting;
  return {connect_action_type::connect};
}

connect_action connect_fsm::on_connected() {
  if (state_ != state::connecting) return {};
  state_ = state::ready;
  connect_action a{connect_action_type::ready};
  a.again = backoff_.attempts() > 0;
  return a;
}

connect_action connect_fsm::on_connect_failed(const char* why, double random01) {
  if (state_ != state::connecting) return {};
  return wait(why, random01);
}

connect_action connect_fsm::on_lost(const char* why, double random01) {
  if (state_ != state::ready && state_ != state::connecting) return {};
  return wait(why, random01);
}

connect_action connect_fsm::on_timer() {
  if (state_ != state::waiting) return {};
  state_ = state::connecting;
  return {connect_action_type::connect};
}

connect_action connect_fsm::on_setup_reply(setup_step step, setup_result r) {
  // A lost connection is reported by on_lost, once, not per setup command.
  if (r != setup_result::error_reply) return {};
  connect_action a{connect_action_type::setup_failed};
  a.why = name(step);
  return a;
}

connect_action connect_fsm::stop() {
  if (state_ == state::stopped) return {};
  state_ = state::stopped;
  return {connect_action_type::close};
}

connect_action connect_fsm::wait(const char* why, double random01) {
  state_ = state::waiting;
  connect_action a{connect_action_type::wait};
  a.delay = backoff_.next(random01);
  a.why = why;
  return a;
}

}  // namespace fg::redis
