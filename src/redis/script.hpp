#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace fg::redis {

// The SHA-1 of `data` in lower-case hex, as Redis names a script (SCRIPT LOAD, EVALSHA).
std::string sha1_hex(std::string_view data);

// A Lua script called by its SHA-1, with its text at hand for when Redis lacks it.
// Pure: builds the RESP commands, sends nothing.
class script {
 public:
  explicit script(std::string text) : text_(std::move(text)), sha_(sha1_hex(text_)) {}
  const std::string& text() const { return text_; }
  const std::string& sha() const { return sha_; }

  // EVALSHA <sha> and then `argc` arguments (numkeys, keys, ARGV) already in RESP form.
  std::string evalsha(std::size_t argc, std::string_view args) const;
  // EVAL <text> and the same arguments: runs the script and caches it in Redis.
  std::string eval(std::size_t argc, std::string_view args) const;

 private:
  std::string text_, sha_;
};

}  // namespace fg::redis
