#include "http/h2_fields.hpp"

#include <algorithm>
#include <array>

namespace fg::http {

namespace {

nghttp2_nv nv(const char* name, std::size_t nlen, const char* value, std::size_t vlen) {
  return {reinterpret_cast<std::uint8_t*>(const_cast<char*>(name)), reinterpret_cast<std::uint8_t*>(const_cast<char*>(value)),
          nlen, vlen, NGHTTP2_NV_FLAG_NONE};
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool connection_specific(std::string_view name) {
  static constexpr std::array<std::string_view, 6> names{"connection", "keep-alive", "proxy-connection",
                                                         "transfer-encoding", "upgrade", "te"};
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool h2_head_of(std::string_view head, h2_head& out) {
  out.storage.clear();
  out.fields.clear();
  // (reserved whole first: the fields point into it)
  out.storage.reserve(head.size() + 4);
  auto eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  if (!line.starts_with("HTTP/1.") || line.size() < 12 || line[8] != ' ') return false;
  const auto code = line.substr(9, 3);
  if (!std::all_of(code.begin(), code.end(), [](char c) { return c >= '0' && c <= '9'; }) || code[0] == '0')
    return false;
  out.storage.append(code);
  out.fields.push_back(nv(":status", 7, out.storage.data(), 3));
  while (eol != std::string_view::npos) {
    head.remove_prefix(eol + 2);
    eol = head.find("\r\n");
    line = head.substr(0, eol);
    if (line.empty()) break;
    const auto colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) continue;
    const auto at = out.storage.size();
    std::transform(line.begin(), line.begin() + static_cast<std::ptrdiff_t>(colon), std::back_inserter(out.storage),
                   [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
    const std::string_view name(out.storage.data() + at, colon);
    if (connection_specific(name)) {
      out.storage.resize(at);
      continue;
    }
    const auto value = trim(line.substr(colon + 1));
    const auto vat = out.storage.size();
    out.storage.append(value);
    out.fields.push_back(nv(out.storage.data() + at, colon, out.storage.data() + vat, value.size()));
  }
  return true;
}

void join_cookie(std::string& joined, std::string_view value) {
  if (!joined.empty()) joined.append("; ");
  joined.append(value);
}

}  // namespace fg::http
