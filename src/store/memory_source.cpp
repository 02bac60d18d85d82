#include "store/memory_source.hpp"

#include "limit/decision_source.hpp"
#include "store/memory_store.hpp"

namespace fg::store {

using limit::holds_lease;
using limit::judged;

status memory_source::start(limit_call& c) {
  store_.evaluate(c.checks, c.decisions, c.now, c.lease);
  return judged(c, this);
}

void memory_source::release(limit_call& c) {
  for (std::size_t i = 0; i < c.checks.size(); ++i)
    if (holds_lease(c, i)) store_.release(c.checks[i].key, c.lease);
}

void memory_source::renew(limit_call& c) {
  const auto now = limit::now_ms();
  for (std::size_t i = 0; i < c.checks.size(); ++i)
    if (holds_lease(c, i)) store_.renew(c.checks[i].key, c.lease, now, c.checks[i].cfg->window.count());
}

void memory_source::charge(const limit_call& c, std::size_t i, std::uint64_t amount) {
  store_.charge(c.checks[i], amount, limit::now_ms());
}

}  // namespace fg::store
