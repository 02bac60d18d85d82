#include "http/framing.hpp"

#include "util/text.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include "util/asio.hpp"

namespace fg::http {


namespace {
using util::is_tchar;
constexpr std::string_view version_prefix = "HTTP/1.";
}  // namespace

head_scanner::state head_scanner::scan(std::string_view d) {
  for (; pos_ < d.size(); ++pos_) {
    const auto c = static_cast<unsigned char>(d[pos_]);
    // Fast path: field values are most of a head.
    if (phase_ == phase::value && c >= 0x20 && c != 0x7f) continue;
    if (c == '\0') return fail("NUL byte in request head");
    if (c == '\r') {
      if (pos_ + 1 >= d.size()) return state::need_more;
      if (d[pos_ + 1] != '\n') return fail("bare CR in request head");
      continue;
    }
    if (c == '\n') {
      if (pos_ == 0 || d[pos_ - 1] != '\r') return fail("bare LF in request head");
      const bool empty_line = pos_ - line_start_ == 1;
      if (line_ == 0) {
        if (empty_line) return fail("empty request line");
        if (phase_ != phase::version) return fail("request line without an HTTP version");
        if (pos_ - 1 - mark_ != version_prefix.size() + 1) return fail("invalid HTTP version");
      } else if (empty_line) {
        end_ = pos_ + 1;
        ++pos_;
        return state::complete;
      } else if (phase_ == phase::name) {
        return fail("header line without a colon");
      }
      ++line_;
      line_start_ = pos_ + 1;
      phase_ = phase::name;
      continue;
    }
    if ((c == ' ' || c == '\t') && pos_ == line_start_)
      return fail(line_ == 0 ? "whitespace before the request line" : "obsolete line folding in request head");
    switch (phase_) {
      case phase::method:
        if (is_tchar(c)) continue;
        if (c != ' ') return fail("invalid request method");
        phase_ = phase::target, mark_ = pos_ + 1;
        continue;
      case phase::target:
        if (c == ' ') {
          if (pos_ == mark_) return fail("empty request target");
          phase_ = phase::version, mark_ = pos_ + 1;
          continue;
        }
        if (c < 0x21 || c == 0x7f) return fail("invalid byte in request target");
        continue;
      case phase::version: {
        const auto i = pos_ - mark_;
        const bool ok = i < version_prefix.size() ? c == static_cast<unsigned char>(version_prefix[i])
                                                  : i == version_prefix.size() && (c == '0' || c == '1');
        if (!ok) return fail("invalid HTTP version");
        continue;
      }
      case phase::name:
        if (is_tchar(c)) continue;
        if (c != ':' || pos_ == line_start_) return fail("invalid header name");
        phase_ = phase::value;
        continue;
      case phase::value:
        if (c == '\t') continue;
        return fail("control byte in request head");
    }
  }
  return state::need_more;
}

chunk_vetter::state chunk_vetter::feed(std::string_view d) {
  // A chunk line's extensions and the trailers: bounded like a request head would be.
  constexpr std::size_t max_line = 4096, max_trailers = 16384;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const auto c = static_cast<unsigned char>(d[i]);
    switch (phase_) {
      case phase::size: {
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v >= 0) {
          if (++digits_ > 15) return fail("chunk size too large");
          size_ = size_ * 16 + static_cast<unsigned>(v);
          continue;
        }
        if (digits_ == 0) return fail("chunk size is not a hex number");
        line_bytes_ = digits_;
        phase_ = phase::size_ws;
        [[fallthrough]];
      }
      case phase::size_ws:
        // BWS, then extensions or the line's end.
        if (c == ' ' || c == '\t') break;
        if (c == ';') phase_ = phase::ext;
        else if (c == '\r') phase_ = phase::size_lf;
        else return fail(c == '\n' ? "bare LF in chunked body" : "invalid chunk size line");
        break;
      case phase::ext:
        if (c == '\r') phase_ = phase::size_lf;
        else if (c == '\n') return fail("bare LF in chunked body");
        else if ((c < 0x20 && c != '\t') || c == 0x7f) return fail("control byte in chunk extension");
        break;
      case phase::size_lf:
        if (c != '\n') return fail("bare CR in chunked body");
        phase_ = size_ == 0 ? phase::trailer_start : phase::data;
        continue;
      case phase::data: {
        const auto take = std::min<std::uint64_t>(size_, d.size() - i);
        size_ -= take;
        i += static_cast<std::size_t>(take) - 1;
        if (size_ == 0) phase_ = phase::data_cr;
        continue;
      }
      case phase::data_cr:
        if (c != '\r') return fail("chunk data not followed by CRLF");
        phase_ = phase::data_lf;
        continue;
      case phase::data_lf:
        if (c != '\n') return fail("chunk data not followed by CRLF");
        phase_ = phase::size, digits_ = 0, size_ = 0, line_bytes_ = 0;
        continue;
      case phase::trailer_start:
        if (c == '\r') {
          phase_ = phase::end_lf;
          continue;
        }
        if (!is_tchar(c)) return fail(c == '\n' ? "bare LF in chunked body" : "invalid trailer field");
        phase_ = phase::trailer;
        [[fallthrough]];
      case phase::trailer:
        if (++trailer_bytes_ > max_trailers) return fail("trailers too large");
        if (c == '\r') phase_ = phase::trailer_lf;
        else if (c == '\n') return fail("bare LF in chunked body");
        else if ((c < 0x20 && c != '\t') || c == 0x7f) return fail("control byte in trailer");
        continue;
      case phase::trailer_lf:
        if (c != '\n') return fail("bare CR in chunked body");
        phase_ = phase::trailer_start;
        continue;
      case phase::end_lf:
        if (c != '\n') return fail("bare CR in chunked body");
        phase_ = phase::done;
        return state::done;
      case phase::done:
        return error_[0] ? state::bad : state::done;
    }
    // Only the chunk line phases (size_ws, ext) get here.
    if (++line_bytes_ > max_line) return fail("chunk extensions too long");
  }
  if (phase_ == phase::done) return error_[0] ? state::bad : state::done;
  return state::more;
}

using util::iequals;
using util::trim;

framing_verdict check_request_framing(const bhttp::request_header<>& h) {
  const auto refuse = [](std::string_view why) { return framing_verdict{{}, why}; };
  body_framing f;
  int te_count = 0, cl_count = 0, host_count = 0;
  std::optional<std::uint64_t> cl;
  for (const auto& field : h) {
    switch (field.name()) {
      case bhttp::field::transfer_encoding:
        ++te_count;
        if (!iequals(trim(field.value()), "chunked")) return refuse("unsupported Transfer-Encoding");
        break;
      case bhttp::field::content_length: {
        ++cl_count;
        auto v = trim(field.value());
        std::uint64_t n = 0;
        auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (v.empty() || ec != std::errc{} || p != v.data() + v.size() || v.size() > 18)
          return refuse("invalid Content-Length");
        if (cl && *cl != n) return refuse("conflicting Content-Length");
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
  if (te_count > 1) return refuse("repeated Transfer-Encoding");
  if (te_count && cl_count) return refuse("both Content-Length and Transfer-Encoding");
  if (te_count && h.version() < 11) return refuse("Transfer-Encoding in an HTTP/1.0 request");
  if (host_count > 1 || (host_count == 0 && h.version() >= 11))
    return refuse(host_count ? "repeated Host" : "missing Host");
  if (te_count) f.type = body_framing::kind::chunked;
  else if (cl && *cl > 0) f.type = body_framing::kind::length, f.length = *cl;
  return {f, {}};
}

}  // namespace fg::http
