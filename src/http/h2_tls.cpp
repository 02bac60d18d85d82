#include "http/h2_connection.ipp"
#include "tls/stream.hpp"

// HTTP/2 over TLS (ALPN h2 on the TLS listener).
namespace fg::http::detail {
template class h2_connection<tls::stream>;
template asio::awaitable<void> serve_h2(worker_context&, tls::stream, connection_slot, net::address, std::string,
                                        std::string);
}  // namespace fg::http::detail
