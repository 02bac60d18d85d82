#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <csignal>

int main(int argc, char* argv[]) {
  // As the gateway's main: OpenSSL writes to its sockets with write(2), and a closed peer
  // must be an EPIPE, not the end of the process.
  std::signal(SIGPIPE, SIG_IGN);
  return Catch::Session().run(argc, argv);
}
