#include "redis/resp.hpp"

#include <charconv>

namespace fg::redis {

namespace {

void append_head(std::string& out, char kind, std::size_t n) {
  char head[24] = {kind};
  auto end = std::to_chars(head + 1, head + sizeof head - 2, n).ptr;
  *end++ = '\r';
  *end++ = '\n';
  out.append(head, static_cast<std::size_t>(end - head));
}

}  // namespace

void append_bulk(std::string& out, std::string_view s) {
  append_head(out, '$', s.size());
  out.append(s);
  out.append("\r\n", 2);
}

void append_array_head(std::string& out, std::size_t n) { append_head(out, '*', n); }

std::string format_command(const std::vector<std::string>& args) {
  std::string cmd;
  append_array_head(cmd, args.size());
  for (const auto& a : args) append_bulk(cmd, a);
  return cmd;
}

}  // namespace fg::redis
