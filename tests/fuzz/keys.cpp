// Key building: query and cookie decoding and the percent-encoding of identities. The
// input is lines: a query string, a Cookie header, a header value, then names.
// Invariants: a key has exactly one hash tag ({...}), no byte that could confuse it,
// and is bounded whatever the identity's size.
#include <cstdlib>
#include <string>

#include "fuzz_input.hpp"
#include "limit/keys.hpp"

using fg::config::key_source;

namespace {

std::string_view g_header, g_cookie;
std::optional<std::string_view> header(const void*, std::string_view name) {
  if (name == "X-Key") return g_header;
  if (name == "Cookie" || name == "cookie") return g_cookie;
  return std::nullopt;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fg::fuzz::input in(data, size);
  const auto flags = in.byte();
  const auto query = in.line();
  const auto cookie = in.line();
  g_cookie = cookie;
  g_header = in.line();
  const auto qname = in.line();
  const auto cname = in.line();
  (void)fg::limit::query_param(query, qname);
  (void)fg::limit::cookie_value(cookie, cname);

  fg::config::limit_config l;
  l.name = "l";
  l.key = {{key_source::kind::ip, {}},
           {key_source::kind::header, "X-Key"},
           {key_source::kind::query, std::string(qname.empty() ? "k" : qname)},
           {key_source::kind::cookie, std::string(cname.empty() ? "sid" : cname)}};
  l.missing_key = (flags & 1) ? fg::config::on_missing_key::skip : fg::config::on_missing_key::anonymous;
  fg::limit::request_parts parts;
  parts.client = "203.0.113.7";
  parts.query = query;
  parts.header = &header;
  const bool cluster = flags & 2;
  auto key = fg::limit::build_key("fuzz:", "route", l, parts, cluster);
  if (!key) return 0;
  if (key->size() > 512) std::abort();
  const auto open = key->find('{');
  const auto close = key->find('}');
  if (open == std::string::npos || close == std::string::npos || close < open) std::abort();
  if (key->find('{', open + 1) != std::string::npos || key->find('}', close + 1) != std::string::npos) std::abort();
  for (unsigned char c : *key)
    if (c < 0x21 || c > 0x7e) std::abort();
  std::string enc;
  fg::limit::append_encoded(enc, in.rest());
  for (unsigned char c : enc)
    if (c < 0x21 || c > 0x7e || c == '{' || c == '}' || c == ':' || c == '|') std::abort();
  return 0;
}
