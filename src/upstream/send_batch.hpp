#pragma once
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>
#include <sys/socket.h>
#include <sys/uio.h>

#include <memory>
#include <span>
#include <vector>

namespace fg::upstream {

// The writes a worker's turn makes, sent in one system call (io_uring) instead of one
// `sendmsg` each: the requests it forwards upstream (those one Redis reply resumes
// together, and any other) and, on plain TCP, the responses it writes to clients.
//
// Why: with an upstream on the same core (as in bench/), every `sendmsg` wakes it and
// it preempts the worker at once, answers that one request and sleeps again, so a
// batch of 20 requests became 20 pairs of context switches. One submission hands the
// upstream all of them before it runs. Measured with bench/ab.py (64 connections):
// context switches per request 0.47 -> 0.05, req/s of a Redis-limited route +11%,
// equal to the same route with no limit.
//
// The responses: with every write of a turn sent at its end, a client's write costs no
// system call of its own. bench/ab.py against the build that sent them one `sendmsg`
// each: proxy CPU per request 0.95x at 64 connections, 0.82x at 256. (The read that
// follows a write, of the upstream's answer or of the client's next request, starts
// before the peer can have answered, and Asio tries it at once: a recv returning
// EAGAIN, about 0.8 a request. Taking those out needed a private flag of Asio's
// reactor, and the proxy's CPU per request came out the same without it: bench/ab.py
// within its 2%, docs/benchmarks.md.)
//
// Per worker thread. While a `collect` lives, the thread's writes are queued
// here (`current()` is set); when it ends they are sent with MSG_DONTWAIT, so nothing
// blocks, and each write completes through its executor. A collect inside another does
// nothing (the outer one sends); one write alone goes as an ordinary Asio write. A
// thread that runs its loop `in_turns` has every write batched so, a turn of the loop at
// a time (below). A write the socket did not take whole goes on as an ordinary Asio
// write from where it stopped. Where io_uring
// is not available (an old kernel, a seccomp profile), nothing collects and writes go
// out one by one as before.
class send_batch {
 public:
  using handler = boost::asio::any_completion_handler<void(boost::system::error_code, std::size_t)>;

  // Collects the calling thread's writes for its lifetime (if `wanted` and
  // io_uring is available), and sends them when it ends.
  class collect {
   public:
    explicit collect(bool wanted = true);
    ~collect();
    collect(const collect&) = delete;
    collect& operator=(const collect&) = delete;
    bool active() const { return batch_ != nullptr; }

   private:
    send_batch* batch_ = nullptr;
  };

  // From now on, the calling thread's writes outside a collect are queued too,
  // and the first one queued posts their sending to `ex` (the thread's own loop): it
  // runs once the handlers ready before it have run, a turn of the loop (one look for
  // ready sockets, which never waits while it is queued, then what that found). At low
  // load a turn is one handler: nothing waits for a batch. The loop itself stays
  // `run()`: a loop of run_one()/poll_one() calls, each of which makes Asio's per-thread
  // cache of handler memory anew and frees it on return, sent every handler and
  // coroutine frame to malloc (23.9k against 17.4k instructions per request).
  static void in_turns(boost::asio::any_io_executor ex);
  // The batch collecting writes on this thread now, or null. (Upstream writes and
  // plain-TCP responses join it; a TLS stream's writes go through OpenSSL, one by one.)
  static send_batch* current();
  // How a queued write completes: `whole` (what the socket did not take at once goes on
  // as an ordinary Asio write), or `with_some` (with what the socket took, maybe
  // nothing: the caller writes the rest, renewing its deadline as the peer takes it).
  enum class completes { whole, with_some };
  // Queues a write of `bufs` (which must live until `h` is called) on `s`. `look_first`:
  // `s` is a pooled connection taken without a look at its socket (pool::take_idle
  // leaves that to the batch): the batch looks at the sockets of all such writes in one
  // submission first, and a write whose socket the peer closed or sent anything on is
  // not sent: it completes with stale_connection().
  void add(boost::asio::ip::tcp::socket& s, std::span<const boost::asio::const_buffer> bufs, handler h,
           bool look_first = false, completes when = completes::whole);

  // What a write whose pooled connection turned out stale completes with: nothing of it
  // went out (ENOTCONN).
  static boost::system::error_code stale_connection();

  ~send_batch();

 private:
  struct write {
    boost::asio::ip::tcp::socket* socket;
    std::span<const boost::asio::const_buffer> bufs;
    handler done;
    bool look_first = false;
    completes when = completes::whole;
  };
  struct ring;
  static send_batch& of_this_thread();
  bool open();
  // Ends a collect: sends what is queued.
  void submit();
  // Sends what is queued.
  void flush();
  void send(std::span<write> writes);
  // Completes `w` with (ec, n), through its socket's executor.
  static void complete(write& w, boost::system::error_code ec, std::size_t n);
  // What `w` goes on with once the socket took `sent` of it (see completes).
  static void go_on(write& w, std::size_t sent);
  // The writes whose sockets are to be looked at first: those found stale complete with
  // stale_connection() and leave `writes`.
  void drop_stale(std::vector<write>& writes);
  // Submits the `n` entries prepared on the ring and waits for their completions:
  // `results[i]` gets the result of entry i (user data i); false if the ring failed (it
  // is then closed, and what it did not take is left as it was).
  bool run_ring(std::size_t n, std::vector<int>& results);
  // Sends `writes` in one submission; `results[i]` gets what send i returned.
  void send_on_ring(std::span<write> writes, std::vector<int>& results);
  std::unique_ptr<ring> ring_;
  bool tried_ = false;
  std::vector<write> queued_;
  std::vector<write> sending_;  // flush's: what queued_ held
  std::vector<write> kept_;     // drop_stale's: the writes it keeps
  std::vector<int> results_;  // send's, send_on_ring's and drop_stale's scratch
  std::vector<char> probes_;  // drop_stale's: the byte each look may see
  std::vector<iovec> iov_;
  std::vector<msghdr> msgs_;
  boost::asio::any_io_executor turns_;  // in_turns: where the sending of a turn is posted
  bool flush_posted_ = false;
};

}  // namespace fg::upstream
