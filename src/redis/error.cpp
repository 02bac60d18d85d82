#include "redis/error.hpp"

#include <string>

namespace fg::redis {

namespace {

class redis_category : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "floodgate.redis"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::not_connected: return "not connected to Redis";
      case errc::timeout: return "Redis command timed out";
      case errc::disconnected: return "Redis connection lost";
      case errc::protocol: return "unexpected Redis reply";
      case errc::cluster: return "Redis Cluster did not serve the slot";
    }
    return "unknown";
  }
};

}  // namespace

const boost::system::error_category& category() {
  static redis_category c;
  return c;
}

}  // namespace fg::redis
