#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace boost::asio {
class io_context;
}

namespace fg::obs {

// Sets up the process logger (stderr) at the given level: trace|debug|info|warn|error.
void init_logging(const std::string& level);

// Runs `ioc` on this thread until it runs out of work. An exception out of a handler
// is logged as "<what>: <message>" and the loop goes on: one handler that throws does
// not end the thread that serves the others.
void run_logged(boost::asio::io_context& ioc, const char* what);

// A co_spawn completion: an exception that ended the coroutine is logged as "<what>:
// <message>" at `warning` or, with `error`, at error level (asio::detached would drop
// it without a word).
struct logged_end {
  const char* what;
  bool error = true;
  void operator()(std::exception_ptr e) const;
};

// Rate-limits error lines: one line per cause per `every`, with a count of what was
// not logged in between, never a line per request. Causes are told apart by their
// text; at most `max_causes` are remembered (past that the oldest is forgotten, so a
// cause that varies without end still logs at most one line per new text). Not
// thread-safe: one per thread or per owner.
class error_log_limiter {
 public:
  using clock = std::chrono::steady_clock;
  explicit error_log_limiter(clock::duration every = std::chrono::seconds(5), std::size_t max_causes = 32)
      : every_(every), max_(max_causes) {}
  // True if a line for `cause` is due at `now`; `suppressed` is then how many of it
  // went unlogged since its previous line.
  bool due(std::string_view cause, clock::time_point now, std::uint64_t& suppressed);

 private:
  struct state {
    clock::time_point last;
    std::uint64_t suppressed = 0;
  };
  struct text_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  clock::duration every_;
  std::size_t max_;
  // Looked up by string_view: a failing request costs no string copy.
  std::unordered_map<std::string, state, text_hash, std::equal_to<>> causes_;
};

// Counts events from any thread and says when a line reporting them is due: at most
// one per `interval_ms`, with how many there were since the last (a flood of events,
// refused connections or evicted keys, costs one line per interval).
class periodic_count {
 public:
  explicit periodic_count(std::int64_t interval_ms = 5000) : interval_(interval_ms) {}
  // Counts one event at `now_ms` (any monotonic ms clock). Returns how many to report
  // if a line is due now, else 0.
  std::uint64_t add(std::int64_t now_ms) {
    pending_.fetch_add(1, std::memory_order_relaxed);
    auto last = last_.load(std::memory_order_relaxed);
    if (now_ms - last < interval_ || !last_.compare_exchange_strong(last, now_ms)) return 0;
    return pending_.exchange(0, std::memory_order_relaxed);
  }

 private:
  std::int64_t interval_;
  std::atomic<std::uint64_t> pending_{0};
  std::atomic<std::int64_t> last_{INT64_MIN / 2};
};

}  // namespace fg::obs
