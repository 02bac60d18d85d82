#include "upstream/send_batch.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <liburing.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "net/peek.hpp"

namespace fg::upstream {

namespace {
thread_local send_batch* collecting = nullptr;
thread_local send_batch* turning = nullptr;  // in_turns
constexpr unsigned ring_entries = 256;

// Posts `f` through the io_context's own executor where `ex` wraps one (a worker's): a
// post through the type-erased any_io_executor makes several conversions of it, about
// 500 instructions, paid here twice a request (callgrind).
template <class F>
void post_on(const boost::asio::any_io_executor& ex, F&& f) {
  if (const auto* io = ex.target<boost::asio::io_context::executor_type>())
    return boost::asio::post(*io, std::forward<F>(f));
  boost::asio::post(ex, std::forward<F>(f));
}
}  // namespace

struct send_batch::ring {
  io_uring r{};
  bool set_up = false;
  // (only a ring io_uring_queue_init set up: on a zeroed one, queue_exit closes fd 0,
  // whatever descriptor holds that number by then)
  ~ring() {
    if (set_up) io_uring_queue_exit(&r);
  }
};

send_batch& send_batch::of_this_thread() {
  thread_local send_batch b;
  return b;
}

send_batch* send_batch::current() { return collecting ? collecting : turning; }

void send_batch::in_turns(boost::asio::any_io_executor ex) {
  auto& b = of_this_thread();
  if (!b.open()) return;
  b.turns_ = std::move(ex);
  turning = &b;
}

send_batch::collect::collect(bool wanted) {
  // (inside another collect: its writes go with the outer one's, when that one ends)
  if (wanted && !collecting && of_this_thread().open()) {
    batch_ = &of_this_thread();
    collecting = batch_;
  }
}

send_batch::collect::~collect() {
  if (batch_) batch_->submit();
}

send_batch::~send_batch() = default;

bool send_batch::open() {
  if (!tried_) {
    tried_ = true;
    auto r = std::make_unique<ring>();
    if (int e = io_uring_queue_init(ring_entries, &r->r, 0); e < 0) {
      spdlog::info("io_uring unavailable ({}): writes go one system call each", std::strerror(-e));
    } else {
      r->set_up = true;
      ring_ = std::move(r);
    }
  }
  return ring_ != nullptr;
}

boost::system::error_code send_batch::stale_connection() {
  return boost::asio::error::not_connected;
}

void send_batch::add(boost::asio::ip::tcp::socket& s, std::span<const boost::asio::const_buffer> bufs, handler h,
                     bool look_first, completes when) {
  queued_.push_back({&s, bufs, std::move(h), look_first, when});
  // Outside a collect (which sends when it ends), the turn's sending is posted once.
  if (!collecting && !flush_posted_ && turns_) {
    flush_posted_ = true;
    post_on(turns_, [this] {
      flush_posted_ = false;
      flush();
    });
  }
}

void send_batch::submit() {
  collecting = nullptr;
  flush();
}

void send_batch::flush() {
  if (queued_.empty()) return;
  // (the two lists trade places: what is sent is taken out of `queued_`, which keeps
  // the other's storage, so that a turn's writes allocate nothing once they have grown)
  auto& writes = sending_;
  writes.swap(queued_);
  struct clear_after {
    std::vector<write>& w;
    ~clear_after() { w.clear(); }
  } clear{writes};
  drop_stale(writes);
  // One write alone goes as an ordinary one: the ring saves nothing then.
  if (writes.empty()) return;
  if (writes.size() == 1) return go_on(writes.front(), 0);
  for (std::size_t at = 0; at < writes.size(); at += ring_entries)
    send(std::span(writes).subspan(at, std::min<std::size_t>(ring_entries, writes.size() - at)));
}

void send_batch::send_on_ring(std::span<write> writes, std::vector<int>& results) {
  const std::size_t n = writes.size();
  // (the scratch vectors are the batch's, kept from one send to the next: no allocation
  // once they have grown; sized before any pointer into them is taken)
  std::size_t pieces = 0;
  for (const auto& w : writes) pieces += w.bufs.size();
  iov_.resize(pieces);
  msgs_.resize(n);
  for (std::size_t i = 0, at = 0; i < n; ++i) {
    msgs_[i] = {};
    msgs_[i].msg_iov = iov_.data() + at;
    msgs_[i].msg_iovlen = writes[i].bufs.size();
    for (const auto& b : writes[i].bufs) iov_[at++] = {const_cast<void*>(b.data()), b.size()};
    auto* sqe = io_uring_get_sqe(&ring_->r);  // the ring has room: at most ring_entries per call
    // MSG_DONTWAIT: a socket that cannot take the data answers -EAGAIN at once, so every
    // send completes within the submission and the worker never waits on the ring.
    io_uring_prep_sendmsg(sqe, writes[i].socket->native_handle(), &msgs_[i], MSG_DONTWAIT | MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, i);
  }
  results.resize(n, -EAGAIN);
  run_ring(n, results);
}

bool send_batch::run_ring(std::size_t n, std::vector<int>& results) {
  // What is submitted completes inside the submission (MSG_DONTWAIT), so waiting for
  // the completions does not block.
  unsigned submitted = 0;
  while (submitted < n) {
    int r = io_uring_submit(&ring_->r);
    if (r > 0) submitted += static_cast<unsigned>(r);
    else if (r != -EINTR && r != -EAGAIN && r != -EBUSY) break;
  }
  // Submitted and never answered: -EIO (a send may have gone out; the request fails
  // rather than risk sending it twice). Not submitted: left as it was.
  for (unsigned i = 0; i < submitted; ++i) results[i] = -EIO;
  for (unsigned seen = 0; seen < submitted;) {
    io_uring_cqe* cqe = nullptr;
    if (int r = io_uring_wait_cqe(&ring_->r, &cqe); r < 0) {
      if (r == -EINTR) continue;
      break;
    }
    if (auto i = io_uring_cqe_get_data64(cqe); i < n) results[i] = cqe->res;
    io_uring_cqe_seen(&ring_->r, cqe);
    ++seen;
  }
  if (submitted < n) {
    // The ring failed: what it did not take is dropped with it.
    spdlog::warn("io_uring submission failed: writes go one system call each");
    ring_.reset();
    return false;
  }
  return true;
}

void send_batch::drop_stale(std::vector<write>& writes) {
  // (in a submission of their own, before any write: a stale connection's write is
  // never sent, so the request can go again on another, whatever its method)
  std::size_t n = 0;
  for (const auto& w : writes) n += w.look_first ? 1 : 0;
  if (n == 0) return;
  results_.assign(n, -EAGAIN);
  probes_.resize(n);
  const bool on_ring = ring_ && n <= ring_entries;
  if (on_ring) {
    for (std::size_t i = 0, k = 0; i < writes.size(); ++i) {
      if (!writes[i].look_first) continue;
      auto* sqe = io_uring_get_sqe(&ring_->r);
      io_uring_prep_recv(sqe, writes[i].socket->native_handle(), &probes_[k], 1, MSG_PEEK | MSG_DONTWAIT);
      io_uring_sqe_set_data64(sqe, k++);
    }
  }
  if (!on_ring || !run_ring(n, results_))  // (then one look each)
    for (std::size_t i = 0, k = 0; i < writes.size(); ++i)
      if (writes[i].look_first)
        results_[k++] = net::peek_input(writes[i].socket->native_handle()) == net::pending_input::nothing ? -EAGAIN : 0;
  // Clean: nothing to read yet (-EAGAIN). Bytes, the end (0) or an error: stale. (The
  // writes kept are moved into `kept_`, as constructions: Asio's any_completion_handler
  // cannot be move-assigned, so no erase.)
  kept_.clear();
  for (std::size_t i = 0, k = 0; i < writes.size(); ++i) {
    auto& w = writes[i];
    if (!w.look_first || results_[k++] == -EAGAIN) {
      kept_.push_back(std::move(w));
      continue;
    }
    complete(w, stale_connection(), 0);
  }
  writes.clear();
  writes.swap(kept_);
}

void send_batch::send(std::span<write> writes) {
  const std::size_t n = writes.size();
  // What each send returned; -EAGAIN where it did not go through the ring (sent as before).
  auto& results = results_;
  results.assign(n, -EAGAIN);
  if (ring_) send_on_ring(writes, results);
  for (std::size_t i = 0; i < n; ++i) {
    auto& w = writes[i];
    const int res = results[i];
    const std::size_t total = boost::asio::buffer_size(w.bufs);
    if (res >= 0 && static_cast<std::size_t>(res) == total) complete(w, {}, total);
    else if (res < 0 && res != -EAGAIN) complete(w, boost::system::error_code(-res, boost::system::system_category()), 0);
    // The socket took part of it, or none yet (or the ring failed before it).
    else go_on(w, res > 0 ? static_cast<std::size_t>(res) : 0);
  }
}

void send_batch::complete(write& w, boost::system::error_code ec, std::size_t n) {
  post_on(w.socket->get_executor(), [h = std::move(w.done), ec, n]() mutable { std::move(h)(ec, n); });
}

void send_batch::go_on(write& w, std::size_t sent) {
  // The caller writes the rest (with_some), or an ordinary write does, from where the
  // socket stopped; nothing sent yet: the write as it came.
  const bool some = w.when == completes::with_some;
  if (sent == 0) {
    if (some) w.socket->async_write_some(w.bufs, std::move(w.done));
    else boost::asio::async_write(*w.socket, w.bufs, std::move(w.done));
    return;
  }
  if (some) return complete(w, {}, sent);
  boost::beast::buffers_suffix<std::span<const boost::asio::const_buffer>> rest(w.bufs);
  rest.consume(sent);
  boost::asio::async_write(*w.socket, rest, [sent, h = std::move(w.done)](boost::system::error_code ec,
                                                                         std::size_t m) mutable {
    std::move(h)(ec, sent + m);
  });
}

}  // namespace fg::upstream
