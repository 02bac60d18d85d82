#pragma once
#include <cstddef>

struct redisReader;
struct redisReplyObjectFunctions;

namespace fg::redis {

// What one Redis reply may make hiredis hold. A server, even a trusted one, sizes
// hiredis' allocations: "*2000000000\r\n" is 14 bytes and asks for 16 GB of pointers,
// and a bulk string is buffered whole before it is handed over. floodgate's replies
// are small (a script's few integers; CLUSTER SLOTS of the largest cluster is well
// under a megabyte), so these bounds are far above any real answer.
inline constexpr std::size_t max_reply_objects = std::size_t{1} << 20;  // arrays, strings, integers, nils
inline constexpr std::size_t max_reply_buffered = std::size_t{16} << 20;  // bytes read and not yet parsed

// One reader's count of the objects left to the reply being parsed.
struct reply_budget {
  const redisReplyObjectFunctions* inner = nullptr;  // hiredis' own (they build the objects)
  std::size_t left = max_reply_objects;
};

// Makes `r` build its objects through `budget`: a reply past max_reply_objects is a
// reader error (hiredis then fails the connection, as on any protocol error).
void bound_replies(redisReader* r, reply_budget& budget);
// Whether `r` holds more than max_reply_buffered unparsed bytes; if so, `r` is put in
// error, so that the next read fails the connection.
bool refuse_if_overfull(redisReader* r);

}  // namespace fg::redis
