#pragma once
// Spans sent to an OpenTelemetry collector over OTLP/HTTP, JSON encoded (the OTLP
// protobuf's JSON mapping: ids in hex, 64-bit integers as strings), by a thread of
// their own: a worker hands a request's spans over and goes on; the queue is bounded
// (a full one drops the newest, counted); an export sends a batch at a time, at least
// every `interval`, each bounded by `timeout`; a failed one drops its batch, counted.
// Nothing on the request path waits for the collector.
#include <boost/asio/ip/tcp.hpp>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "config/config.hpp"

namespace boost::asio { class io_context; }

namespace fg::obs {

// An attribute: a string value, or an integer one when `is_int`.
struct span_attribute {
  std::string_view key;  // (a literal: the semantic conventions' names)
  std::string text;
  std::int64_t number = 0;
  bool is_int = false;
};

struct span {
  std::array<char, 32> trace_id{};
  std::array<char, 16> span_id{};
  std::array<char, 16> parent_id{};  // all '\0': a root span
  std::string name;
  int kind = 2;  // OTLP SpanKind: 2 server, 3 client
  std::int64_t start_ns = 0, end_ns = 0;  // Unix epoch
  bool error = false;  // status ERROR (else UNSET)
  std::string message;  // the status's message (with an error)
  std::vector<span_attribute> attributes;

  bool has_parent() const { return parent_id[0] != '\0'; }
  void add(std::string_view key, std::string_view value) { attributes.push_back({key, std::string(value), 0, false}); }
  void add(std::string_view key, std::int64_t value) { attributes.push_back({key, {}, value, true}); }
};

// Process-wide counts (the metrics read them): spans sent, and spans dropped because
// the queue was full or their export failed.
struct span_events {
  static inline std::atomic<std::uint64_t> exported{0};
  static inline std::atomic<std::uint64_t> dropped_queue_full{0};
  static inline std::atomic<std::uint64_t> dropped_export_failed{0};
};

// The body of one export: an ExportTraceServiceRequest with one resource (service.name)
// and one scope.
std::string otlp_json(const config::span_export_config& cfg, const std::vector<span>& spans);

class span_exporter {
 public:
  span_exporter() = default;
  // An export in flight is cut short; what is queued gets one last export (its timeout at
  // most 1 s), the rest is dropped (counted), and the thread ends: a stop waits for a
  // collector a second at most.
  ~span_exporter();
  span_exporter(const span_exporter&) = delete;
  span_exporter& operator=(const span_exporter&) = delete;

  // At start and at each reload: where and how to send (off: nothing more is taken,
  // what is queued still goes where it was to go). The thread starts the first time it
  // is on.
  void configure(const config::span_export_config& cfg);
  // Whether a request's `spans` are worth making (any thread, no lock): the export is
  // on and the queue had room a moment ago (else they are counted as dropped). A flood
  // of denials then costs a relaxed load each, not a span each.
  bool has_room(std::size_t spans) const;
  // A request's spans (any thread). Dropped, counted, when the queue has no room.
  void submit(std::vector<span>&& spans);
  // Whether an unsampled denial's span may go (any thread): denied_per_second at most,
  // by the second of `now_s` (a monotonic clock's).
  bool take_denial(std::int64_t now_s, std::size_t per_second);

 private:
  void run();
  bool send(const config::span_export_config& cfg, std::string body);

  std::mutex mu_;
  std::condition_variable wake_;
  config::span_export_config cfg_;  // (mu_)
  std::deque<span> queue_;          // (mu_)
  bool stop_ = false;               // (mu_)
  std::atomic<bool> accepting_{false};
  std::atomic<std::size_t> queued_{0}, capacity_{0};
  std::atomic<std::int64_t> denial_second_{0};
  std::atomic<std::size_t> denials_{0};  // sent in denial_second_
  bool failing_ = false;  // (the thread's: the last export failed)
  std::string resolved_for_;  // (the thread's) the collector's host:port whose addresses these are
  std::vector<boost::asio::ip::tcp::endpoint> addresses_;
  boost::asio::io_context* sending_ = nullptr;  // (mu_) the export in flight: stopped by the destructor
  std::thread thread_;
};

}  // namespace fg::obs
