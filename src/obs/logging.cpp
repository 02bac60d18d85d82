#include "obs/logging.hpp"

#include <boost/asio/io_context.hpp>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace fg::obs {

void run_logged(boost::asio::io_context& ioc, const char* what) {
  for (;;) {
    try {
      ioc.run();
      return;
    } catch (const std::exception& e) {
      spdlog::error("{}: {}", what, e.what());
    }
  }
}

void logged_end::operator()(std::exception_ptr e) const {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    spdlog::log(error ? spdlog::level::err : spdlog::level::warn, "{}: {}", what, ex.what());
  }
}

void init_logging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("floodgate");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::flush_on(spdlog::level::info);
}

bool error_log_limiter::due(std::string_view cause, clock::time_point now, std::uint64_t& suppressed) {
  auto it = causes_.find(cause);
  if (it != causes_.end()) {
    auto& s = it->second;
    if (now - s.last < every_) {
      ++s.suppressed;
      return false;
    }
    suppressed = s.suppressed;
    s = {now, 0};
    return true;
  }
  if (causes_.size() >= max_) {
    auto oldest = causes_.begin();
    for (auto i = causes_.begin(); i != causes_.end(); ++i)
      if (i->second.last < oldest->second.last) oldest = i;
    causes_.erase(oldest);
  }
  causes_.emplace(std::string(cause), state{now, 0});
  suppressed = 0;
  return true;
}

}  // namespace fg::obs
