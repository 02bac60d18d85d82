#include "deadline/board.hpp"

namespace fg::deadline {

void board::sweep(clock::time_point now) {
  coarse_now = now;
  boost::system::error_code ignored;
  for (auto& s : entries_) {
    if (s.idle && !s.lean && s.lean_at <= now && s.socket) {
      s.lean = true;
      s.lean_at = clock::time_point::max();
      s.socket->cancel(ignored);
    }
    if (s.deadline > now) continue;
    s.deadline = clock::time_point::max();
    s.expired = true;
    if (s.socket) s.socket->cancel(ignored);
    if (s.upstream) s.upstream->cancel(ignored);
  }
}

void board::cancel_idle() {
  boost::system::error_code ignored;
  for (auto& s : entries_)
    if (s.idle && s.socket) s.socket->cancel(ignored);
}

}  // namespace fg::deadline
