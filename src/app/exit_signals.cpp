#include "app/exit_signals.hpp"

#include <boost/asio/io_context.hpp>

#include <csignal>

namespace fg::app {

void hold_signals_for_good() {
  // (reachable through these pointers for the process's life: no leak to report)
  static auto* loop = new boost::asio::io_context;
  static auto* held = new boost::asio::signal_set(*loop, SIGTERM, SIGINT, SIGHUP);
  static const bool usr1 = (held->add(SIGUSR1), true);
  (void)usr1;
}

void ignore_signals_from_now(std::initializer_list<boost::asio::signal_set*> sets) {
  boost::system::error_code ignored;
  for (auto* set : sets) set->clear(ignored);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) std::signal(sig, SIG_IGN);
}

}  // namespace fg::app
