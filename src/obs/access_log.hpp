#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace spdlog { class logger; }

namespace fg::obs {

struct access_record {
  std::string_view client_ip;
  std::string_view method;
  std::string_view target;
  unsigned status = 0;
  std::uint64_t bytes_in = 0;   // request body bytes received
  std::uint64_t bytes_out = 0;  // response body bytes sent
  double upstream_ms = -1;      // -1: no upstream involved
  double total_ms = 0;
  std::string_view request_id;
  std::string_view route;
  std::string_view plan;  // the plan in force of the route's first limit with plans ("" = none)
  std::int64_t delay_ms = 0;  // how long it waited for its turn (on_exceed: delay)
  std::string_view protocol = "HTTP/1.1";  // the client's: HTTP/1.1 (or 1.0) or HTTP/2
  std::string_view trace_id;  // the trace the upstream was told of (tracing.propagate), "" = none
  int grpc_status = -1;       // a gRPC call's grpc-status (the upstream's, or the gateway's own), -1 = none
};

// One line per request, text or JSON, written by spdlog's async logger off the
// request path. Thread-safe; `off` makes write() a no-op.
class access_log {
 public:
  static std::shared_ptr<access_log> open(const config::log_config& cfg);
  bool enabled() const { return logger_ != nullptr; }
  void write(const access_record& r) const;
  // A log written to a file opens it again (logrotate moved it: SIGUSR1, as nginx); the
  // lines queued meanwhile go to the new file. False, logged, if it cannot be opened.
  bool reopen() const;
  ~access_log();

 private:
  class file_sink;
  std::shared_ptr<spdlog::logger> logger_;
  std::shared_ptr<file_sink> file_;
  bool json_ = false;
};

}  // namespace fg::obs
