#include "http/h2_connection.ipp"

// HTTP/2 over a TCP socket (prior knowledge on the plain listener); h2_tls.cpp compiles
// the same for TLS streams (two files build at once).
namespace fg::http::detail {
template class h2_connection<tcp::socket>;
template asio::awaitable<void> serve_h2(worker_context&, tcp::socket, connection_slot, net::address, std::string,
                                        std::string);
}  // namespace fg::http::detail
