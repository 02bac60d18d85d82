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

// One connection's current wait, behind named operations. Its owner arms the deadline
// of each wait; once it has passed, the sweeper cancels the waits of the connection's
// socket and of the upstream socket in use, and the wait reads as expired(). The
// sockets are the owner's: it names the upstream one for as long as it is in use
// (watch_upstream, forget_upstream), and the connection's for the entry's life
// (board::open); a socket outliving its entry is what the owner's member order assures.
class entry {
 public:
  // The wait ends `timeout` from now (deadline::after), or at `when`.
  void arm(std::chrono::milliseconds timeout) {
    expired_ = false;
    deadline_ = after(timeout);
  }
  void arm_at(clock::time_point when) {
    expired_ = false;
    deadline_ = when;
  }
  // Ends the current wait now, as its deadline would (a connection ended for another);
  // a wait begun again before the next sweep is ended by it.
  void expire_now();
  // The sweeper cancelled the current wait at its deadline (or expire_now did).
  bool expired() const { return expired_; }
  clock::time_point deadline() const { return deadline_; }

  // Idle: waiting for a request with nothing buffered (a drain closes it). Busy: not.
  void set_idle() { idle_ = true; }
  void set_busy() { idle_ = false; }
  // While idle, at `when` the sweeper takes back the read (lean() then holds), and the
  // owner waits on without buffers; stay_awake() takes that back.
  void lean_at(clock::time_point when) { lean_at_ = when; }
  clock::time_point lean_at() const { return lean_at_; }
  void stay_awake() { lean_at_ = clock::time_point::max(); }
  bool lean() const { return lean_; }
  void set_lean() { lean_ = true; }  // lean already (a parked connection)
  void woke() { lean_ = false; }

  // The upstream socket in use, whose wait the deadline cancels too; none after forget.
  void watch_upstream(boost::asio::ip::tcp::socket* s) { upstream_ = s; }
  // An upstream wait no socket of its own holds (a stream on a shared HTTP/2 connection):
  // ended through `fn(arg)` as the upstream socket's would be, until forget_upstream.
  void watch_upstream(void (*fn)(void*), void* arg) {
    upstream_hook_ = fn;
    upstream_hook_arg_ = arg;
  }
  void forget_upstream() {
    upstream_ = nullptr;
    upstream_hook_ = nullptr;
  }
  bool watches_upstream(const boost::asio::ip::tcp::socket* s) const { return upstream_ == s; }

  // Waits that no socket of the entry's holds (an HTTP/2 stream's: its body to come, its
  // turn to send) are ended through `fn(arg)`, called when the deadline passes (and by
  // expire_now); it must only cancel (post), never run a wait's continuation inline.
  void on_expire(void (*fn)(void*), void* arg) {
    hook_ = fn;
    hook_arg_ = arg;
  }

 private:
  friend class board;
  boost::asio::ip::tcp::socket* socket_ = nullptr;
  boost::asio::ip::tcp::socket* upstream_ = nullptr;
  clock::time_point deadline_ = clock::time_point::max();
  bool expired_ = false;
  bool idle_ = true;
  bool lean_ = false;
  clock::time_point lean_at_ = clock::time_point::max();
  void (*hook_)(void*) = nullptr;
  void* hook_arg_ = nullptr;
  void (*upstream_hook_)(void*) = nullptr;
  void* upstream_hook_arg_ = nullptr;
  void expire_upstream() {
    boost::system::error_code ignored;
    if (upstream_) upstream_->cancel(ignored);
    if (upstream_hook_) upstream_hook_(upstream_hook_arg_);
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
      it_->socket_ = socket;
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
