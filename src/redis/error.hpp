#pragma once
#include <boost/system/error_code.hpp>

#include <type_traits>

namespace fg::redis {

// cluster: the cluster did not serve the call (CLUSTERDOWN, TRYAGAIN past its retries,
// redirections past their bound).
enum class errc { not_connected = 1, timeout, disconnected, protocol, cluster };
const boost::system::error_category& category();
inline boost::system::error_code make_error_code(errc e) { return {static_cast<int>(e), category()}; }

}  // namespace fg::redis

template <>
struct boost::system::is_error_code_enum<fg::redis::errc> : std::true_type {};
