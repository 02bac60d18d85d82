#pragma once
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <list>
#include <utility>

// Deadlines of a worker's connections, kept as entries on one board per worker and
// checked by a sweeper tick instead of a timer per operation (see board::sweep). A
// part of its own so that the pool and the tunnel arm deadlines without knowing the
// worker, and so that a watch is given back by its owner's destructor, whatever ends it.
namespace fg::deadline {

using clock = std::chrono::steady_clock;

// Deadlines are checked every `sweep_interval`. `coarse_now` is the worker thread's
// steady_clock::now() as of the sweeper's last tick, so setting a deadline reads no
// clock; after() adds one interval, so that a deadline never fires early (it fires up
// to two intervals late).
inline constexpr std::chrono::milliseconds sweep_interval{50};
inline thread_local clock::time_point coarse_now = clock::now();
// A keep-alive connection idle this long gives its buffers back (see http/session).
inline constexpr std::chrono::milliseconds lean_after{100};
inline clock::time_point after(clock::duration d) { return coarse_now + sweep_interval + d; }

// One connection's current wait. Its owner writes the deadline of each wait here; once
// it has passed, the sweeper cancels both sockets and sets `expired`.
struct entry {
  boost::asio::ip::tcp::socket* socket = nullptr;
  boost::asio::ip::tcp::socket* upstream = nullptr;  // the upstream connection in use, if any
  clock::time_point deadline = clock::time_point::max();
  bool expired = false;  // the sweeper cancelled the current wait
  bool idle = true;      // waiting for a request with nothing buffered: safe to close on drain
  // While idle, at lean_at the sweeper cancels the read (setting `lean`), and the
  // owner waits on without buffers.
  bool lean = false;
  clock::time_point lean_at = clock::time_point::max();

  void arm(std::chrono::milliseconds timeout) {
    expired = false;
    deadline = after(timeout);
  }
  void arm_at(clock::time_point when) {
    expired = false;
    deadline = when;
  }
};

// The entries of one worker. Not thread-safe: it lives on the worker's thread.
class board {
 public:
  // An entry on the board for as long as the watch lives (move-only).
  class watch {
   public:
    watch() = default;
    watch(board& b, boost::asio::ip::tcp::socket* socket) : board_(&b) {
      it_ = b.entries_.emplace(b.entries_.end());
      it_->socket = socket;
    }
    watch(watch&& o) noexcept : board_(std::exchange(o.board_, nullptr)), it_(o.it_) {}
    watch& operator=(watch&& o) noexcept {
      if (this != &o) {
        reset();
        board_ = std::exchange(o.board_, nullptr);
        it_ = o.it_;
      }
      return *this;
    }
    watch(const watch&) = delete;
    watch& operator=(const watch&) = delete;
    ~watch() { reset(); }
    void reset() {
      if (board_) board_->entries_.erase(it_);
      board_ = nullptr;
    }
    entry& operator*() const { return *it_; }
    entry* operator->() const { return &*it_; }

   private:
    board* board_ = nullptr;
    std::list<entry>::iterator it_;
  };

  watch open(boost::asio::ip::tcp::socket* socket) { return watch(*this, socket); }
  bool empty() const { return entries_.empty(); }
  // One tick: advances coarse_now, takes back idle reads due to go lean, and cancels
  // the waits whose deadline has passed.
  void sweep(clock::time_point now);
  // Cancels the wait of every idle entry (a drain closes those).
  void cancel_idle();

 private:
  std::list<entry> entries_;
};

}  // namespace fg::deadline
