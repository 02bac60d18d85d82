#include "upstream/connection.hpp"

#include "tls/client_context.hpp"
#include "util/asio.hpp"

namespace fg::upstream {

asio::awaitable<boost::system::error_code> start_tls(connection& c, const tls::client_context& ctx,
                                                     std::string_view host, SSL_SESSION* resume) {
  SSL* ssl = ctx.new_ssl(host, resume);
  if (!ssl) co_return boost::system::error_code(static_cast<int>(ERR_get_error() | 1), tls::category());
  c.tls = tls::channel(ssl, c.socket, false);
  auto [ec, n] = co_await c.tls.async_handshake(c.socket, util::use_tuple);
  co_return ec;
}

std::string_view host_of(std::string_view s) {
  if (s.starts_with('[')) {
    const auto close = s.find(']');
    return close == std::string_view::npos ? s : s.substr(1, close - 1);
  }
  const auto colon = s.rfind(':');
  return colon == std::string_view::npos ? s : s.substr(0, colon);
}

}  // namespace fg::upstream
