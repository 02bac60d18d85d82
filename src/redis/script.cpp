#include "redis/script.hpp"

#include <openssl/evp.h>

#include <stdexcept>

#include "redis/resp.hpp"

namespace fg::redis {

namespace {

std::string call(std::string_view verb, std::string_view body, std::size_t argc, std::string_view args) {
  std::string cmd;
  // One allocation: three heads (24 bytes at most each) and two \r\n fit in 80.
  cmd.reserve(80 + verb.size() + body.size() + args.size());
  append_array_head(cmd, argc + 2);
  append_bulk(cmd, verb);
  append_bulk(cmd, body);
  cmd += args;
  return cmd;
}

}  // namespace

std::string sha1_hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &len, EVP_sha1(), nullptr) != 1 || len != 20)
    throw std::runtime_error("OpenSSL cannot compute SHA-1");
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = digits[md[i] >> 4];
    out[2 * i + 1] = digits[md[i] & 0xf];
  }
  return out;
}

std::string script::evalsha(std::size_t argc, std::string_view args) const { return call("EVALSHA", sha_, argc, args); }

std::string script::eval(std::size_t argc, std::string_view args) const { return call("EVAL", text_, argc, args); }

}  // namespace fg::redis
