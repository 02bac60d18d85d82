// The Redis reply decoder: hiredis' reader with floodgate's bounds on what a reply may
// make it hold (redis/reply_bounds.hpp), each reply copied out (redis::reply::from) and
// read as a cluster error. Bytes are fed in pieces, as reads deliver them.
#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <cstdlib>

#include "fuzz_input.hpp"
#include "redis/cluster_map.hpp"
#include "redis/reply.hpp"
#include "redis/reply_bounds.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fg::fuzz::input in(data, size);
  const unsigned step = 1 + in.byte() % 128;
  const auto bytes = in.rest();
  redisReader* reader = redisReaderCreate();
  fg::redis::reply_budget budget;
  fg::redis::bound_replies(reader, budget);
  const fg::config::endpoint asked{"127.0.0.1", 7000};
  for (std::size_t at = 0; at < bytes.size(); at += step) {
    auto piece = bytes.substr(at, step);
    if (redisReaderFeed(reader, piece.data(), piece.size()) != REDIS_OK) break;
    if (fg::redis::refuse_if_overfull(reader)) break;
    void* r = nullptr;
    bool failed = false;
    while (!failed) {
      if (redisReaderGetReply(reader, &r) != REDIS_OK) {
        failed = true;
        break;
      }
      if (!r) break;
      auto* rr = static_cast<redisReply*>(r);
      auto copy = fg::redis::reply::from(rr);
      if (copy.type == fg::redis::reply::kind::error) {
        (void)fg::redis::classify_error(copy.str);
        (void)fg::redis::parse_redirect(copy.str, asked);
      }
      freeReplyObject(r);
    }
    if (failed) break;
  }
  redisReaderFree(reader);
  return 0;
}
