#pragma once
#include <string_view>

namespace fg::obs {

// The service manager's readiness protocol (systemd's sd_notify, for a Type=notify
// unit): what the process is doing, sent to the socket NOTIFY_SOCKET names. Each is a
// no-op when the process was not started with one (a shell, a container).
// Serving (after the start, or after a reload); `status` is the one line systemctl shows.
void notify_ready(std::string_view status);
// A reload begins (READY follows when it is done, applied or refused).
void notify_reloading();
// The drain begins: the process is on its way out.
void notify_stopping(std::string_view status);

}  // namespace fg::obs
