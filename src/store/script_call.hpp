#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "limit/decision.hpp"

struct redisReply;

namespace fg::store {

using limit::check;
using limit::decision;

// One call of the limiter script (lua/evaluate.lua) for many requests: its arguments,
// and the reading of its reply. What requests share goes once per call: each limit's
// parameters (a spec), each list of limits a request has (a shape), and the requests
// themselves when they are alike (same shape, same keys, no nonce needed): one entry
// with a count, which the script decides exactly as if they had been sent one by one,
// and answers with runs of requests whose numbers move by a constant step.
class script_call {
 public:
  // Where a request's decisions are in the reply: its entry and its place in it.
  struct slot {
    std::size_t entry, ordinal;
  };
  slot add(std::span<const check> checks, std::string_view nonce);
  std::size_t requests() const { return requests_; }
  // What a call does (lua/evaluate.lua's flag): decide and record; a dry run, which
  // decides and records nothing (its requests must not be alike: one request, or ones
  // with different keys); a refund, which gives back what admitted requests took (each
  // check's cost of it; the requests added must not be alike either); a charge, which
  // adds each check's cost to its key without a decision (a post-charge; the balance may
  // go past the limit; for config::takes_any_cost algorithms).
  enum class mode : std::int64_t { decide = 0, dry_run = 1, refund = 2, charge = 3 };
  // The script's arguments (numkeys, KEYS, ARGV) as RESP bulk strings, and their count.
  // With `keys_in_argv` the keys go last in ARGV, none in KEYS (a cluster node's call
  // for many slots: lua/evaluate.lua).
  std::pair<std::size_t, std::string> finish(mode m = mode::decide, bool keys_in_argv = false);
  std::pair<std::size_t, std::string> finish(bool dry_run) { return finish(dry_run ? mode::dry_run : mode::decide); }
  // After finish(), on the script's reply: finds each entry's runs; false when the reply
  // is not what the script returns for this call. The reply must outlive decisions().
  bool read(const redisReply* r);
  // After read(): the decisions of the request at `s` (whose checks are `checks`).
  void decisions(slot s, std::span<const check> checks, std::span<decision> out) const;

 private:
  struct entry {
    std::size_t shape;
    std::span<const check> checks;  // the first request's: its keys are the entry's
    std::string_view nonce;         // only for a shape that names entries (count 1)
    std::size_t hash;               // of the keys, to find alike requests quickly
    std::size_t count = 1;
    std::size_t runs = 0;           // after read(): where its runs start, in numbers
  };
  std::size_t spec_index(const check& c);
  std::size_t shape_index(std::span<const std::size_t> specs);
  std::int64_t number(std::size_t i) const;

  std::string specs_, shapes_;  // their parts of ARGV[1]
  std::vector<std::pair<const config::limit_config*, std::uint64_t>> spec_ids_;  // (limit, cost)
  std::vector<std::vector<std::size_t>> shape_ids_;
  std::vector<bool> shape_named_;
  std::vector<std::size_t> scratch_;
  std::vector<entry> entries_;
  std::size_t requests_ = 0;
  const unsigned char* reply_ = nullptr;
};

// The member of a concurrency lease held for check `index` (0-based) of a call.
std::string lease_member(std::string_view nonce, std::size_t index);

}  // namespace fg::store
