#pragma once
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace fg::util {

// ASCII case-insensitive equality (HTTP field names, tokens).
inline bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           auto lower = [](char c) {
             auto u = static_cast<unsigned>(static_cast<unsigned char>(c));
             return u - 'A' < 26u ? u | 0x20u : u;
           };
           return lower(x) == lower(y);
         });
}

// Field names equal once '_' is read as '-' and case is ignored: how CGI-style
// backends (and some frameworks) fold names, so "Content_Length" is Content-Length to them.
inline bool iequals_folded(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           auto fold = [](char c) {
             auto u = static_cast<unsigned>(static_cast<unsigned char>(c));
             return u == '_' ? unsigned('-') : u - 'A' < 26u ? u | 0x20u : u;
           };
           return fold(x) == fold(y);
         });
}

// Without leading and trailing optional whitespace (SP, HTAB).
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Copies `s` to `p` and returns the end: for text written straight into space reserved
// up front (one resize, then puts) instead of one append per piece.
// RFC 9110 §5.6.2 tchar: what a method and a field name are made of.
inline constexpr auto token_bytes = [] {
  std::array<bool, 256> t{};
  for (int c = '0'; c <= '9'; ++c) t[static_cast<std::size_t>(c)] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[static_cast<std::size_t>(c)] = t[static_cast<std::size_t>(c - 32)] = true;
  for (char c : std::string_view("!#$%&'*+-.^_`|~")) t[static_cast<unsigned char>(c)] = true;
  return t;
}();
inline bool is_tchar(unsigned char c) { return token_bytes[c]; }

// An HTTP token (tchar+): a header name, a method.
inline bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); });
}

// A configuration name (route, upstream, limit): 1-64 letters, digits, - _ .
inline bool is_name(std::string_view s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

inline char* put(char* p, std::string_view s) {
  if (!s.empty()) std::memcpy(p, s.data(), s.size());  // an empty view's data may be null
  return p + s.size();
}

// FNV-1a (64 bits): stable across builds and machines. `basis` other than the standard
// offset gives an independent lane.
inline constexpr std::uint64_t fnv1a_prime = 1099511628211ull;
inline std::uint64_t fnv1a(std::string_view text, std::uint64_t basis = 14695981039346656037ull) {
  for (unsigned char ch : text) basis = (basis ^ ch) * fnv1a_prime;
  return basis;
}

// FNV-1a of `text` as 16 hex digits.
inline std::string fnv1a_hex(std::string_view text) {
  std::uint64_t h = fnv1a(text);
  static constexpr char hex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[static_cast<std::size_t>(i)] = hex[h & 0xf];
  return out;
}

}  // namespace fg::util
