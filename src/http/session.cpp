#include "http/session.hpp"

#include "http/serve.hpp"

// The session over a TCP socket (the plain listener's connections); session_tls.cpp
// compiles the same for TLS streams.
namespace fg::http::detail {
template class session<tcp::socket>;
}  // namespace fg::http::detail

namespace fg::http {

void start_session(worker_context& ctx, boost::asio::ip::tcp::socket socket, const boost::asio::ip::address& peer,
                   connection_slot slot) {
  detail::set_client_options(socket);
  detail::spawn(ctx, std::move(socket), std::move(slot), net::normalize(peer), false);
}

}  // namespace fg::http
