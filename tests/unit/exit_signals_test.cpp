// app::hold_signals_for_good: once it has run, a signal set that lets its signals go
// (cleared or destroyed, as the server's are when it exits) leaves none of them to its
// default action, which would end the process by that signal.
#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <csignal>

#include "app/exit_signals.hpp"

TEST_CASE("exit_signals: signals let go by the server's sets keep no default action", "[app]") {
  fg::app::hold_signals_for_good();
  boost::asio::io_context ioc;
  {
    boost::asio::signal_set sets(ioc, SIGTERM, SIGINT, SIGHUP);
    sets.add(SIGUSR1);
    boost::system::error_code ec;
    sets.clear(ec);
  }
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) {
    INFO("signal " << sig);
    struct sigaction now {};
    REQUIRE(::sigaction(sig, nullptr, &now) == 0);
    CHECK(now.sa_handler != SIG_DFL);
  }
}
