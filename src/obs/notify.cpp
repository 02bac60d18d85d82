#include "obs/notify.hpp"

#include <systemd/sd-daemon.h>

#include <ctime>
#include <string>

namespace fg::obs {

namespace {

// STATUS is one line: a newline would start another assignment.
std::string one_line(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  return out;
}

void send(const std::string& state) {
  // (0: keep NOTIFY_SOCKET in the environment; a reload notifies again)
  sd_notify(0, state.c_str());
}

}  // namespace

void notify_ready(std::string_view status) { send("READY=1\nSTATUS=" + one_line(status)); }

void notify_reloading() {
  // systemd 253's notify-reload wants the time the reload began; 252 ignores it.
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const auto usec = static_cast<unsigned long long>(ts.tv_sec) * 1'000'000ull + static_cast<unsigned long long>(ts.tv_nsec) / 1000;
  send("RELOADING=1\nSTATUS=reloading the configuration\nMONOTONIC_USEC=" + std::to_string(usec));
}

void notify_stopping(std::string_view status) { send("STOPPING=1\nSTATUS=" + one_line(status)); }

}  // namespace fg::obs
