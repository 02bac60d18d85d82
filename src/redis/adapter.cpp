#include "redis/adapter.hpp"

#include <boost/asio/post.hpp>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include "util/asio.hpp"

namespace fg::redis {

using error_code = boost::system::error_code;

void adapter::attach(redisAsyncContext* ac, std::weak_ptr<void> owner) {
  ac_ = ac;
  owner_ = std::move(owner);
  ac_->ev.data = this;
  ac_->ev.addRead = &adapter::add_read;
  ac_->ev.delRead = &adapter::del_read;
  ac_->ev.addWrite = &adapter::add_write;
  ac_->ev.delWrite = &adapter::del_write;
  ac_->ev.cleanup = &adapter::cleanup;
  bound_replies(ac_->c.reader, budget_);
  error_code ec;
  sd_.assign(ac_->c.fd, ec);
}

void adapter::add_read(void* p) {
  auto* self = static_cast<adapter*>(p);
  self->want_read_ = true;
  self->wait_read();
}
void adapter::del_read(void* p) { static_cast<adapter*>(p)->want_read_ = false; }
void adapter::add_write(void* p) {
  auto* self = static_cast<adapter*>(p);
  self->want_write_ = true;
  self->write_soon();
}
void adapter::del_write(void* p) { static_cast<adapter*>(p)->want_write_ = false; }

void adapter::cleanup(void* p) {
  auto* self = static_cast<adapter*>(p);
  self->want_read_ = self->want_write_ = false;
  if (self->sd_.is_open()) {
    error_code ec;
    self->sd_.cancel(ec);
    // hiredis closes the descriptor itself.
    self->sd_.release();
  }
}

void adapter::wait_read() {
  if (reading_ || !want_read_ || !sd_.is_open()) return;
  auto keep = owner_.lock();
  // The owner is being destroyed: no wait may outlive it.
  if (!keep) return;
  reading_ = true;
  sd_.async_wait(asio::posix::stream_descriptor::wait_read, [this, keep = std::move(keep)](error_code ec) {
    reading_ = false;
    if (ec || !ac_) return;
    if (want_read_) {
      last_input_ = std::chrono::steady_clock::now();
      // Past the cap the read fails the connection (hiredis' protocol-error path).
      refuse_if_overfull(ac_->c.reader);
      redisAsyncHandleRead(ac_);
    }
    wait_read();
  });
}

void adapter::write_soon() {
  // Once connected the socket is almost always writable: write at the end of this
  // event-loop turn (commands queued meanwhile go in the same write) and wait for
  // writability only if hiredis could not write everything.
  if (writing_ || !want_write_ || !sd_.is_open()) return;
  if (!ac_ || !(ac_->c.flags & REDIS_CONNECTED)) {
    wait_write();
    return;
  }
  auto keep = owner_.lock();
  if (!keep) return;
  writing_ = true;
  asio::post(ex_, [this, keep = std::move(keep)] {
    writing_ = false;
    if (!ac_ || !want_write_) return;
    redisAsyncHandleWrite(ac_);
    wait_write();
  });
}

void adapter::wait_write() {
  if (writing_ || !want_write_ || !sd_.is_open()) return;
  auto keep = owner_.lock();
  if (!keep) return;
  writing_ = true;
  sd_.async_wait(asio::posix::stream_descriptor::wait_write, [this, keep = std::move(keep)](error_code ec) {
    writing_ = false;
    if (ec || !ac_) return;
    if (want_write_) redisAsyncHandleWrite(ac_);
    wait_write();
  });
}

}  // namespace fg::redis
