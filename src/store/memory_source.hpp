#pragma once

#include "limit/decision_source.hpp"

namespace fg::store {

using limit::decision_source;
using limit::limit_call;
using limit::status;

class memory_store;

// Decisions from the in-process store (shared by all workers): always at once.
class memory_source final : public decision_source {
 public:
  explicit memory_source(memory_store& store) : store_(store) {}
  status start(limit_call& c) override;
  void release(limit_call& c) override;
  void renew(limit_call& c) override;
  void charge(const limit_call& c, std::size_t i, std::uint64_t amount) override;

 private:
  memory_store& store_;
};

}  // namespace fg::store
