#include "http/framing.hpp"

#include "util/text.hpp"

#include <algorithm>
#include <charconv>

namespace fg::http {

namespace bhttp = boost::beast::http;

head_scanner::state head_scanner::scan(std::string_view d) {
  for (; pos_ < d.size(); ++pos_) {
    char c = d[pos_];
    // Fast path: printable bytes other than a space opening a line.
    if (static_cast<unsigned char>(c) > '\r' && (c != ' ' || pos_ != line_start_)) continue;
    if (c == '\0') {
      error_ = "NUL byte in request head";
      return state::bad;
    }
    if (c == '\r') {
      if (pos_ + 1 >= d.size()) return state::need_more;
      if (d[pos_ + 1] != '\n') {
        error_ = "bare CR in request head";
        return state::bad;
      }
      continue;
    }
    if (c == '\n') {
      if (pos_ == 0 || d[pos_ - 1] != '\r') {
        error_ = "bare LF in request head";
        return state::bad;
      }
      bool empty_line = pos_ - line_start_ == 1;
      ++line_;
      line_start_ = pos_ + 1;
      if (empty_line && line_ == 1) {
        error_ = "empty request line";
        return state::bad;
      }
      if (empty_line) {
        end_ = pos_ + 1;
        ++pos_;
        return state::complete;
      }
      continue;
    }
    if ((c == ' ' || c == '\t') && pos_ == line_start_) {
      error_ = line_ == 0 ? "whitespace before the request line" : "obsolete line folding in request head";
      return state::bad;
    }
  }
  return state::need_more;
}

using util::iequals;
using util::trim;

namespace {

}  // namespace

std::optional<body_framing> check_request_framing(const bhttp::request_header<>& h, const char*& why) {
  body_framing f;
  int te_count = 0, cl_count = 0, host_count = 0;
  std::optional<std::uint64_t> cl;
  for (const auto& field : h) {
    switch (field.name()) {
      case bhttp::field::transfer_encoding:
        ++te_count;
        if (!iequals(trim(field.value()), "chunked")) {
          why = "unsupported Transfer-Encoding";
          return std::nullopt;
        }
        break;
      case bhttp::field::content_length: {
        ++cl_count;
        auto v = trim(field.value());
        std::uint64_t n = 0;
        auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (v.empty() || ec != std::errc{} || p != v.data() + v.size() || v.size() > 18) {
          why = "invalid Content-Length";
          return std::nullopt;
        }
        if (cl && *cl != n) {
          why = "conflicting Content-Length";
          return std::nullopt;
        }
        cl = n;
        break;
      }
      case bhttp::field::host:
        ++host_count;
        break;
      default:
        break;
    }
  }
  if (te_count > 1) {
    why = "repeated Transfer-Encoding";
    return std::nullopt;
  }
  if (te_count && cl_count) {
    why = "both Content-Length and Transfer-Encoding";
    return std::nullopt;
  }
  if (te_count && h.version() < 11) {
    why = "Transfer-Encoding in an HTTP/1.0 request";
    return std::nullopt;
  }
  if (host_count > 1 || (host_count == 0 && h.version() >= 11)) {
    why = host_count ? "repeated Host" : "missing Host";
    return std::nullopt;
  }
  if (te_count) f.type = body_framing::kind::chunked;
  else if (cl && *cl > 0) f.type = body_framing::kind::length, f.length = *cl;
  return f;
}

}  // namespace fg::http
