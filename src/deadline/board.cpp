#include "deadline/board.hpp"

namespace fg::deadline {

void entry::expire_now() {
  deadline_ = coarse_now;  // (the next sweep cancels it again, should it wait again)
  expired_ = true;
  boost::system::error_code ignored;
  if (socket_) socket_->cancel(ignored);
  // (an upstream stream of a shared connection is ended too: the client is gone; a
  // pooled connection's socket is not, so as not to read the client's end as a timeout)
  if (upstream_hook_) upstream_hook_(upstream_hook_arg_);
  if (hook_) hook_(hook_arg_);
}

void board::sweep(clock::time_point now) {
  coarse_now = now;
  boost::system::error_code ignored;
  for (auto& s : entries_) {
    if (s.idle_ && !s.lean_ && s.lean_at_ <= now && s.socket_) {
      s.lean_ = true;
      s.lean_at_ = clock::time_point::max();
      s.socket_->cancel(ignored);
    }
    if (s.deadline_ > now) continue;
    s.deadline_ = clock::time_point::max();
    s.expired_ = true;
    if (s.socket_) s.socket_->cancel(ignored);
    s.expire_upstream();
    if (s.hook_) s.hook_(s.hook_arg_);
  }
}

void board::cancel_idle() {
  boost::system::error_code ignored;
  for (auto& s : entries_)
    if (s.idle_ && s.socket_) s.socket_->cancel(ignored);
}

}  // namespace fg::deadline
