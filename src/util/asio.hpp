#pragma once
// The names every asynchronous file uses for Asio and Beast, defined once. Declares the
// namespaces only: no Beast header comes with it.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace boost::beast::http {}

namespace fg {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

namespace util {
// A completion token that gives a coroutine (error_code, results...) instead of throwing.
inline constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
// The same as a deferred operation: awaited in place, with no coroutine frame of its own.
inline constexpr auto deferred_tuple = asio::as_tuple(asio::deferred);
}  // namespace util

}  // namespace fg
