#include "obs/access_log.hpp"

#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>
#include <fmt/chrono.h>
#include <spdlog/async.h>
#include <spdlog/details/file_helper.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace fg::obs {

// spdlog's file sink, with a way to open its file again: the new file is opened first and
// swapped in under the sink's own lock, so a file that cannot be opened leaves the old one
// writing (spdlog's own reopen closes first, and a failed open then leaves no file).
class access_log::file_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit file_sink(std::string path) : path_(std::move(path)), file_(std::make_unique<spdlog::details::file_helper>()) {
    file_->open(path_, false);
  }
  void reopen() {
    auto next = std::make_unique<spdlog::details::file_helper>();
    next->open(path_, false);  // (throws, and nothing changed, if it cannot)
    std::lock_guard lock(mutex_);
    file_.swap(next);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    file_->write(line);
  }
  void flush_() override { file_->flush(); }

 private:
  std::string path_;
  std::unique_ptr<spdlog::details::file_helper> file_;
};

std::shared_ptr<access_log> access_log::open(const config::log_config& cfg) {
  auto log = std::make_shared<access_log>();
  if (cfg.access_log == "off") return log;
  if (!spdlog::thread_pool()) spdlog::init_thread_pool(16384, 1);
  std::shared_ptr<spdlog::sinks::sink> sink;
  if (cfg.access_log == "stdout") {
    sink = std::make_shared<spdlog::sinks::stdout_sink_mt>();
  } else {
    log->file_ = std::make_shared<file_sink>(cfg.access_log);
    sink = log->file_;
  }
  // Overrun drops the oldest lines rather than blocking a worker when the sink is slow.
  log->logger_ = std::make_shared<spdlog::async_logger>("access", sink, spdlog::thread_pool(),
                                                        spdlog::async_overflow_policy::overrun_oldest);
  log->logger_->set_pattern("%v");
  log->logger_->flush_on(spdlog::level::info);
  log->json_ = cfg.format == config::log_format::json;
  return log;
}

access_log::~access_log() {
  if (logger_) logger_->flush();
}

bool access_log::reopen() const {
  if (!file_) return true;
  try {
    // (lines written meanwhile go to the moved file, as logrotate's "create" expects)
    file_->reopen();
    return true;
  } catch (const std::exception& e) {
    spdlog::error("access log: cannot open it again: {}", e.what());
    return false;
  }
}

namespace {
std::string quote(std::string_view s) { return boost::json::serialize(boost::json::string(s)); }
}  // namespace

void access_log::write(const access_record& r) const {
  if (!logger_) return;
  auto now = std::chrono::system_clock::now();
  if (json_) {
    logger_->info(
        "{{\"time\":\"{:%Y-%m-%dT%H:%M:%S}Z\",\"client_ip\":{},\"method\":{},\"target\":{},\"status\":{},"
        "\"bytes_in\":{},\"bytes_out\":{},\"upstream_ms\":{:.3f},\"total_ms\":{:.3f},\"request_id\":{},\"route\":{},"
        "\"plan\":{},\"delay_ms\":{},\"protocol\":{},\"trace_id\":{},\"grpc_status\":{}}}",
        std::chrono::floor<std::chrono::seconds>(now), quote(r.client_ip), quote(r.method), quote(r.target), r.status,
        r.bytes_in, r.bytes_out, r.upstream_ms, r.total_ms, quote(r.request_id), quote(r.route),
        r.plan.empty() ? std::string("null") : quote(r.plan), r.delay_ms, quote(r.protocol),
        r.trace_id.empty() ? std::string("null") : quote(r.trace_id),
        r.grpc_status < 0 ? std::string("null") : std::to_string(r.grpc_status));
  } else {
    logger_->info("{:%Y-%m-%dT%H:%M:%S}Z {} \"{} {}\" {} {} {} {:.3f} {:.3f} {} {} {} {} {} {} {}",
                  std::chrono::floor<std::chrono::seconds>(now), r.client_ip, r.method, r.target, r.status, r.bytes_in,
                  r.bytes_out, r.upstream_ms, r.total_ms, r.request_id, r.route.empty() ? "-" : r.route,
                  r.plan.empty() ? "-" : r.plan, r.delay_ms, r.protocol, r.trace_id.empty() ? "-" : r.trace_id,
                  r.grpc_status < 0 ? std::string("-") : std::to_string(r.grpc_status));
  }
}

}  // namespace fg::obs
