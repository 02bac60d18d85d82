// cluster_map: a CLUSTER SLOTS answer (any RESP bytes, decoded by hiredis' bounded
// reader) and MOVED/ASK redirections. Invariants: a parsed map's ranges are sorted and
// disjoint, within the slot space, and master_for agrees with them.
#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <cstdlib>

#include "fuzz_input.hpp"
#include "redis/cluster_map.hpp"
#include "redis/reply.hpp"
#include "redis/reply_bounds.hpp"

using namespace fg::redis;

namespace {

void check_map(const cluster_map& m) {
  std::size_t covered = 0;
  int last = -1;
  for (const auto& r : m.ranges()) {
    if (r.first > r.last || r.last >= slot_count || static_cast<int>(r.first) <= last) std::abort();
    last = r.last;
    covered += r.last - r.first + 1u;
    const auto* at = m.master_for(r.first);
    if (!at || !(*at == r.master)) std::abort();
  }
  if (covered != m.covered()) std::abort();
  if (m.master_for(slot_count) != nullptr) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fg::fuzz::input in(data, size);
  const auto mode = in.byte();
  const fg::config::endpoint asked{"10.0.0.1", 7000};
  const auto bytes = in.rest();
  if (mode & 2) {
    // CLUSTER NODES' text: addresses only, at most 64
    auto nodes = node_addresses(bytes, asked, 64);
    if (nodes.size() > 64) std::abort();
    for (const auto& n : nodes)
      if (n.port == 0) std::abort();
    return 0;
  }
  if (mode & 1) {
    auto r = parse_redirect(bytes, asked);
    if (r && (r->slot >= slot_count || r->address.port == 0)) std::abort();
    (void)classify_error(bytes);
    return 0;
  }
  redisReader* reader = redisReaderCreate();
  reply_budget budget;
  bound_replies(reader, budget);
  void* r = nullptr;
  if (redisReaderFeed(reader, bytes.data(), bytes.size()) == REDIS_OK && redisReaderGetReply(reader, &r) == REDIS_OK &&
      r) {
    auto* rr = static_cast<redisReply*>(r);
    if (auto m = cluster_map::parse(rr, asked)) check_map(*m);
    if (auto m = cluster_map::parse(reply::from(rr), asked)) check_map(*m);
    freeReplyObject(r);
  }
  redisReaderFree(reader);
  return 0;
}
