#include "http/h2_fields.hpp"

#include <algorithm>
#include <array>

#include "util/text.hpp"

namespace fg::http {

namespace {

nghttp2_nv nv(const char* name, std::size_t nlen, const char* value, std::size_t vlen) {
  return {reinterpret_cast<std::uint8_t*>(const_cast<char*>(name)), reinterpret_cast<std::uint8_t*>(const_cast<char*>(value)),
          nlen, vlen, NGHTTP2_NV_FLAG_NONE};
}

// `name` appended to `storage` in lower case (HTTP/2's field names): the copy.
std::string_view append_lower(std::string& storage, std::string_view name) {
  const auto at = storage.size();
  std::transform(name.begin(), name.end(), std::back_inserter(storage),
                 [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
  return {storage.data() + at, name.size()};
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
    const auto name = append_lower(out.storage, line.substr(0, colon));
    if (connection_specific(name)) {
      out.storage.resize(at);
      continue;
    }
    const auto value = util::trim(line.substr(colon + 1));
    const auto vat = out.storage.size();
    out.storage.append(value);
    out.fields.push_back(nv(out.storage.data() + at, colon, out.storage.data() + vat, value.size()));
  }
  return true;
}

bool h2_request_of(std::string_view head, std::string_view scheme, bool te_trailers, h2_head& out) {
  out.storage.clear();
  out.fields.clear();
  out.storage.reserve(head.size() + scheme.size() + 32);  // (whole first: the fields point into it)
  auto eol = head.find("\r\n");
  const std::string_view line = head.substr(0, eol);
  const auto sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 <= sp1 + 1) return false;
  auto keep = [&](std::string_view v) {
    const auto at = out.storage.size();
    out.storage.append(v);
    return std::string_view(out.storage.data() + at, v.size());
  };
  auto add = [&](std::string_view n, std::string_view v) { out.fields.push_back(nv(n.data(), n.size(), v.data(), v.size())); };
  const auto method = keep(line.substr(0, sp1)), path = keep(line.substr(sp1 + 1, sp2 - sp1 - 1));
  add(":method", method);
  add(":scheme", keep(scheme));
  const std::size_t authority_at = out.fields.size();
  add(":authority", {});
  add(":path", path);
  bool has_authority = false;
  while (eol != std::string_view::npos) {
    head.remove_prefix(eol + 2);
    eol = head.find("\r\n");
    const auto field = head.substr(0, eol);
    if (field.empty()) break;
    const auto colon = field.find(':');
    if (colon == std::string_view::npos || colon == 0) continue;
    const auto at = out.storage.size();
    const auto name = append_lower(out.storage, field.substr(0, colon));
    const auto value = util::trim(field.substr(colon + 1));
    if (name == "host") {
      out.storage.resize(at);
      if (!has_authority) out.fields[authority_at] = nv(":authority", 10, keep(value).data(), value.size());
      has_authority = true;
      continue;
    }
    if (connection_specific(name)) {
      out.storage.resize(at);
      continue;
    }
    add(name, keep(value));
  }
  if (!has_authority) out.fields.erase(out.fields.begin() + static_cast<std::ptrdiff_t>(authority_at));
  if (te_trailers) add("te", "trailers");
  return true;
}

void h1_head_of(unsigned status, std::span<const std::pair<std::string, std::string>> fields, bool ended,
                std::string& out) {
  out.assign("HTTP/1.1 ");
  out.append(std::to_string(status));
  out.append(" \r\n");
  bool has_length = false;
  for (const auto& [n, v] : fields) {
    if (connection_specific(n)) continue;
    has_length = has_length || n == "content-length";
    out.append(n).append(": ").append(v).append("\r\n");
  }
  if (!has_length) out.append(ended ? "content-length: 0\r\n" : "transfer-encoding: chunked\r\n");
  out.append("\r\n");
}

void join_cookie(std::string& joined, std::string_view value) {
  if (!joined.empty()) joined.append("; ");
  joined.append(value);
}

}  // namespace fg::http
