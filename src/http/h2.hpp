#pragma once
// HTTP/2 on a downstream connection (h2_connection.hpp), from the connection loop
// (serve.hpp): a TLS connection whose client chose h2 by ALPN, or a plain one that began
// with HTTP/2's preface (http2.cleartext). Light: the HTTP/2 code itself is compiled in
// h2.cpp and h2_tls.cpp only.
#include <boost/asio/awaitable.hpp>

#include <string>

#include "http/worker_context.hpp"
#include "net/client_ip.hpp"

namespace fg::http::detail {

// The client's first bytes on a plain connection when it speaks HTTP/2 with prior
// knowledge (RFC 9113 §3.4).
inline constexpr std::string_view h2_preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Serves the connection as HTTP/2 until it ends. `preread`: its bytes read already;
// `client_cert`: its verified client certificate's subject (TLS).
template <class Stream>
boost::asio::awaitable<void> serve_h2(worker_context& ctx, Stream stream, connection_slot slot, net::address peer,
                                      std::string preread, std::string client_cert);

}  // namespace fg::http::detail
