#include "http/responses.hpp"

#include <boost/beast/http/status.hpp>

#include <charconv>

namespace fg::http {

std::string_view reason(unsigned status) {
  return boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
}

std::string render(const local_response& r) {
  std::string default_body;
  std::string_view body = r.body;
  if (body.empty() && r.status >= 400) {
    std::string lower;
    for (char c : reason(r.status)) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    default_body = "{\"error\":\"" + lower + "\"}\n";
    body = default_body;
  }
  char num[24];
  auto [p, ec] = std::to_chars(num, num + sizeof num, body.size());
  std::string out;
  out.reserve(160 + body.size() + r.extra.size());
  out.append("HTTP/1.1 ").append(std::to_string(r.status)).append(" ").append(reason(r.status)).append("\r\n");
  out.append("Content-Type: ").append(r.content_type).append("\r\n");
  out.append("Content-Length: ").append(num, static_cast<std::size_t>(p - num)).append("\r\n");
  if (!r.request_id.empty()) out.append("X-Request-Id: ").append(r.request_id).append("\r\n");
  out.append(r.extra);
  if (!r.keep_alive) out.append("Connection: close\r\n");
  out.append("\r\n");
  if (!r.head) out.append(body);
  return out;
}

}  // namespace fg::http
