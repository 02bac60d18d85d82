#include "config/duration.hpp"

#include <boost/asio/ip/address.hpp>

#include <charconv>

namespace fg::config {
namespace {

std::optional<std::uint64_t> parse_uint(std::string_view s) {
  std::uint64_t v = 0;
  if (s.empty()) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<duration> unit_of(std::string_view u) {
  using namespace std::chrono;
  if (u == "ms") return milliseconds(1);
  if (u == "s") return duration_cast<milliseconds>(seconds(1));
  if (u == "m") return duration_cast<milliseconds>(minutes(1));
  if (u == "h") return duration_cast<milliseconds>(hours(1));
  if (u == "d") return duration_cast<milliseconds>(hours(24));
  if (u == "w") return duration_cast<milliseconds>(hours(24 * 7));
  return std::nullopt;
}

}  // namespace

std::optional<duration> parse_duration(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  auto n = parse_uint(text.substr(0, i));
  auto unit = unit_of(text.substr(i));
  if (!n || !unit) return std::nullopt;
  // Keep arithmetic far from overflow: a year is plenty for any timeout or window.
  if (*n > 366ull * 24 * 3600 * 1000) return std::nullopt;
  auto d = duration(static_cast<duration::rep>(*n) * unit->count());
  if (d > std::chrono::hours(24 * 366)) return std::nullopt;
  return d;
}

std::optional<rate> parse_rate(std::string_view text) {
  auto slash = text.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  auto n = parse_uint(text.substr(0, slash));
  auto unit = unit_of(text.substr(slash + 1));
  if (!n || !unit || *n == 0 || *unit == duration(1)) return std::nullopt;
  return rate{*n, *unit};
}

std::optional<endpoint> parse_endpoint(std::string_view text) {
  std::string_view host, port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return std::nullopt;
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return std::nullopt;
  }
  auto p = parse_uint(port);
  if (host.empty() || !p || *p == 0 || *p > 65535) return std::nullopt;
  return endpoint{std::string(host), static_cast<std::uint16_t>(*p)};
}

std::optional<std::uint64_t> parse_size(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::uint64_t mult = 1;
  switch (text.back()) {
    case 'k': case 'K': mult = 1024; break;
    case 'm': case 'M': mult = 1024 * 1024; break;
    case 'g': case 'G': mult = 1024ull * 1024 * 1024; break;
    default: break;
  }
  if (mult != 1) text.remove_suffix(1);
  auto n = parse_uint(text);
  if (!n || *n > (std::uint64_t{1} << 50) / mult) return std::nullopt;
  return *n * mult;
}

bool is_loopback(const endpoint& ep) {
  if (ep.host == "localhost") return true;
  boost::system::error_code ec;
  auto a = boost::asio::ip::make_address(ep.host, ec);
  if (ec) return false;
  if (a.is_v6() && a.to_v6().is_v4_mapped()) a = boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, a.to_v6());
  return a.is_loopback();
}

std::string endpoint::str() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

}  // namespace fg::config
