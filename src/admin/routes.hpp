#pragma once
#include <boost/asio/awaitable.hpp>

#include <string>
#include <string_view>

#include "admin/status.hpp"

namespace boost::json { class object; }
namespace fg::store { class inspector; }

namespace fg::admin {

// One admin answer, before it becomes an HTTP response (pure, tested without sockets).
struct reply {
  reply(unsigned s = 200, std::string b = {}, std::string type = "application/json", std::string allow_ = {})
      : status(s), body(std::move(b)), content_type(std::move(type)), allow(std::move(allow_)) {}
  unsigned status = 200;
  std::string body;
  std::string content_type = "application/json";
  // Set on 405: the methods the path takes.
  std::string allow;
  // Set on 401: the WWW-Authenticate challenge.
  std::string www_authenticate;
  // Set on 429: seconds until a call is admitted again.
  unsigned retry_after = 0;
};

// A JSON answer: `o` serialized, with `status`.
reply json_reply(unsigned status, const boost::json::object& o);

// The admin paths: each with the methods it takes and its handler.
reply dispatch(std::string_view method, std::string_view target, status_source& status);

// What the asynchronous paths (/limits) use besides the status source.
struct services {
  store::inspector* inspector = nullptr;  // null: /limits answers 503
};

// Every path, the asynchronous ones awaited (on the admin's io_context); dispatch()
// answers those 503.
boost::asio::awaitable<reply> serve(std::string_view method, std::string_view target, status_source& status,
                                    const services& with);

}  // namespace fg::admin
