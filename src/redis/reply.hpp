#pragma once
#include <cstdint>
#include <string>
#include <vector>

struct redisReply;

namespace fg::redis {

// A Redis reply copied out of hiredis (whose reply is freed when its callback returns).
struct reply {
  enum class kind { nil, integer, string, status, error, array } type = kind::nil;
  std::int64_t integer = 0;
  std::string str;
  std::vector<reply> elements;

  static reply from(const redisReply* r);
  bool is_error() const { return type == kind::error; }
};

}  // namespace fg::redis
