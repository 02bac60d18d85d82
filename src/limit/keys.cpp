#include "limit/keys.hpp"

#include <array>
#include <cstdio>

#include "util/text.hpp"

namespace fg::limit {

namespace {

int hexval(char h) {
  if (h >= '0' && h <= '9') return h - '0';
  if (h >= 'a' && h <= 'f') return h - 'a' + 10;
  if (h >= 'A' && h <= 'F') return h - 'A' + 10;
  return -1;
}

// Bytes that are escaped in a key: controls, space, non-ASCII, and the key's own
// delimiters. A table: every byte of every identity passes here.
constexpr auto unsafe_bytes = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c)
    t[static_cast<std::size_t>(c)] = c <= 0x20 || c >= 0x7f || c == '{' || c == '}' || c == ':' || c == '|' || c == '%';
  return t;
}();

bool unsafe(unsigned char c) { return unsafe_bytes[c]; }

// The byte that `s` escapes at `i` ("%4B"), or -1 if no valid escape starts there.
int escape_at(std::string_view s, std::size_t i) {
  if (s[i] != '%' || i + 2 >= s.size() || hexval(s[i + 1]) < 0 || hexval(s[i + 2]) < 0) return -1;
  return hexval(s[i + 1]) * 16 + hexval(s[i + 2]);
}

// Percent-decoding (an invalid escape stays as it is); with `plus`, '+' is a space too
// (query strings: application/x-www-form-urlencoded).
void percent_decode(std::string_view raw, bool plus, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (int b = escape_at(raw, i); b >= 0) {
      out += static_cast<char>(b);
      i += 2;
    } else {
      out += plus && raw[i] == '+' ? ' ' : raw[i];
    }
  }
}

// Whether every '%' in `raw` starts a valid escape.
bool escapes_valid(std::string_view raw) {
  for (auto i = raw.find('%'); i != std::string_view::npos; i = raw.find('%', i + 1))
    if (escape_at(raw, i) < 0) return false;
  return true;
}

// Whether the query parameter name `raw` decodes to `name`, without a copy.
bool name_is(std::string_view raw, std::string_view name) {
  std::size_t j = 0;
  for (std::size_t i = 0; i < raw.size(); ++i, ++j) {
    char c = raw[i];
    if (int b = escape_at(raw, i); b >= 0) {
      c = static_cast<char>(b);
      i += 2;
    } else if (c == '+') {
      c = ' ';
    }
    if (j == name.size() || name[j] != c) return false;
  }
  return j == name.size();
}

// FNV-1a, twice with different offsets: stable across builds and machines, so every
// gateway instance derives the same key.
std::string digest(std::string_view v) {
  std::uint64_t a = 14695981039346656037ull, b = 1099511628211ull * 31;
  for (unsigned char c : v) {
    a = (a ^ c) * 1099511628211ull;
    b = (b ^ c) * 1099511628211ull + 0x9e3779b97f4a7c15ull;
  }
  char buf[40];
  // '%' starts it: an encoded value always has "%25" there, so none can equal a digest.
  std::snprintf(buf, sizeof buf, "%%%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

}  // namespace

void append_encoded(std::string& out, std::string_view value) {
  static constexpr char hex[] = "0123456789ABCDEF";
  // Safe runs are appended whole: an IP or a token is usually one run.
  std::size_t i = 0;
  while (i < value.size()) {
    std::size_t j = i;
    while (j < value.size() && !unsafe(static_cast<unsigned char>(value[j]))) ++j;
    out.append(value.data() + i, j - i);
    if (j == value.size()) break;
    const auto c = static_cast<unsigned char>(value[j]);
    const char esc[3] = {'%', hex[c >> 4], hex[c & 0xf]};
    out.append(esc, 3);
    i = j + 1;
  }
}

std::optional<std::string_view> query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    auto amp = query.find('&');
    auto pair = query.substr(0, amp);
    auto eq = pair.find('=');
    // As servlet containers read them: names are matched decoded ("api%5Fkey=K" is
    // "api_key" upstream, so it must not be a missing key here), and a pair with a bad
    // escape is dropped (Tomcat drops it, so "api_key=%zz1&api_key=K" is K upstream and
    // must not be a fresh identity per spelling here).
    if (name_is(pair.substr(0, eq), name) && escapes_valid(pair))
      return eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

std::optional<std::string_view> cookie_value(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    auto semi = header.find(';');
    auto pair = util::trim(header.substr(0, semi));
    auto eq = pair.find('=');
    if (eq != std::string_view::npos && util::trim(pair.substr(0, eq)) == name) {
      auto v = util::trim(pair.substr(eq + 1));
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      return v;
    }
    if (semi == std::string_view::npos) break;
    header.remove_prefix(semi + 1);
  }
  return std::nullopt;
}

bool build_key(std::string& out, std::string_view prefix, std::string_view route, const config::limit_config& l,
               const request_parts& r) {
  using kind = config::key_source::kind;
  // The head, "<prefix>{<route>:<limit>:", in one write.
  out.resize(prefix.size() + route.size() + l.name.size() + 3);
  char* p = out.data();
  for (std::string_view piece : {prefix, std::string_view("{"), route, std::string_view(":"),
                                 std::string_view(l.name), std::string_view(":")})
    p = util::put(p, piece);
  const std::size_t at = out.size();
  std::string decoded;
  bool first = true;
  for (const auto& src : l.key) {
    std::optional<std::string_view> v;
    switch (src.type) {
      case kind::global: v = "*"; break;
      case kind::ip: v = r.client; break;
      case kind::header: v = r.header ? r.header(r.header_ctx, src.name) : std::nullopt; break;
      case kind::query:
        // Decoded, so "abc" and "%61bc" are one identity (as they are to the upstream).
        if (auto raw = query_param(r.query, src.name)) {
          percent_decode(*raw, true, decoded);
          v = decoded;
        }
        break;
      case kind::cookie: {
        // Percent-decoded too ('+' stays): Spring's @CookieValue reads "%4B" as "K".
        auto c = r.header ? r.header(r.header_ctx, "Cookie") : std::nullopt;
        if (c) {
          if (auto raw = cookie_value(*c, src.name)) {
            if (raw->find('%') == std::string_view::npos) {
              v = raw;
            } else {
              percent_decode(*raw, false, decoded);
              v = decoded;
            }
          }
        }
        break;
      }
    }
    if (v && v->empty() && src.type != kind::global) v.reset();
    if (!first) out += '|';
    first = false;
    if (!v) {
      if (l.missing_key == config::on_missing_key::skip) return false;
      out += "%anon";
      continue;
    }
    if (src.type == kind::global) out += '*';
    else append_encoded(out, *v);
  }
  if (out.size() - at > 200) out.replace(at, std::string::npos, digest(std::string_view(out).substr(at)));
  out += '}';
  return true;
}

std::optional<std::string> build_key(std::string_view prefix, std::string_view route, const config::limit_config& l,
                                     const request_parts& r) {
  std::string key;
  if (!build_key(key, prefix, route, l, r)) return std::nullopt;
  return key;
}

void build_checks(std::vector<check>& checks, std::string_view prefix, const config::route_config& route,
                  const request_parts& r) {
  std::size_t n = 0;
  for (const auto& l : route.limits) {
    if (n == checks.size()) checks.emplace_back();
    auto& c = checks[n];
    if (!build_key(c.key, prefix, route.name, l, r)) continue;
    c.cfg = &l;
    c.cost = l.cost;
    ++n;
  }
  checks.resize(n);
}

}  // namespace fg::limit
