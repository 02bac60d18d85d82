#include "redis/reply.hpp"

#include <hiredis/hiredis.h>

namespace fg::redis {

reply reply::from(const redisReply* r) {
  reply out;
  if (!r) return out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out.type = kind::integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
      out.type = kind::string;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = kind::status;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = kind::error;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.type = kind::array;
      out.elements.reserve(r->elements);
      for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(from(r->element[i]));
      break;
    default:
      break;
  }
  return out;
}

}  // namespace fg::redis
