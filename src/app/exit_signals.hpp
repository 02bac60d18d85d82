#pragma once
#include <boost/asio/signal_set.hpp>

#include <initializer_list>

// The process's signals (SIGTERM, SIGINT, SIGHUP, SIGUSR1) around its exit: none of them
// may end it by its default action once the server has them, however late it comes.
namespace fg::app {

// Asio gives a signal its default action back when the last set holding it lets it go;
// a set never destroyed (on a loop never run) holds these for the process's life. Call
// before the server's own sets are made.
void hold_signals_for_good();

// Exiting: `sets` let their signals go (to no default action, held above), and the
// signals are ignored from now on.
void ignore_signals_from_now(std::initializer_list<boost::asio::signal_set*> sets);

}  // namespace fg::app
