#pragma once
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <chrono>
#include <memory>

#include "redis/reply_bounds.hpp"

struct redisAsyncContext;

namespace fg::redis {

// hiredis' event hooks on an Asio event loop: hiredis asks for reads and writes
// (add/del), the adapter waits for the socket and calls hiredis back. hiredis owns
// the descriptor and closes it; the adapter only borrows it. It also bounds what a
// reply may make hiredis hold (redis/reply_bounds.hpp). Not thread-safe.
class adapter {
 public:
  explicit adapter(boost::asio::any_io_executor ex) : ex_(std::move(ex)), sd_(ex_) {}
  adapter(const adapter&) = delete;
  adapter& operator=(const adapter&) = delete;

  // Takes over `ac`'s event hooks and socket; call it before setting hiredis'
  // callbacks (hiredis may call hooks from them). `owner` is kept alive while a wait
  // is outstanding, since hiredis calls into it from the handlers.
  void attach(redisAsyncContext* ac, std::weak_ptr<void> owner);
  // The context, until hiredis frees it (forget()) or it is freed by us.
  redisAsyncContext* context() const { return ac_; }
  // hiredis frees the context (a failed connect, a disconnect) or we are about to.
  void forget() { ac_ = nullptr; }
  // When the socket last had input for hiredis (a reply byte, or the peer's close).
  std::chrono::steady_clock::time_point last_input() const { return last_input_; }

 private:
  static void add_read(void* self);
  static void del_read(void* self);
  static void add_write(void* self);
  static void del_write(void* self);
  static void cleanup(void* self);

  void wait_read();
  void write_soon();
  void wait_write();

  boost::asio::any_io_executor ex_;
  boost::asio::posix::stream_descriptor sd_;
  redisAsyncContext* ac_ = nullptr;
  std::weak_ptr<void> owner_;
  reply_budget budget_;
  std::chrono::steady_clock::time_point last_input_{};
  // What hiredis wants, and whether a wait for it is outstanding.
  bool want_read_ = false, want_write_ = false, reading_ = false, writing_ = false;
};

}  // namespace fg::redis
