#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fg::redis {

// Appends `s` to a RESP command as one bulk string ($<length>\r\n<s>\r\n).
void append_bulk(std::string& out, std::string_view s);
// Appends the head of a RESP array of `n` elements (*<n>\r\n).
void append_array_head(std::string& out, std::size_t n);
// `args` as one RESP command (an array of bulk strings).
std::string format_command(const std::vector<std::string>& args);

}  // namespace fg::redis
