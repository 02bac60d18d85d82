#include "net/read_wait.hpp"

#include <boost/version.hpp>

#if BOOST_VERSION == 108100 && defined(BOOST_ASIO_HAS_EPOLL) && !defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT)
#include <boost/asio/detail/epoll_reactor.hpp>
#define FG_READ_WAIT_REACTOR 1
#endif

namespace fg::net {

#ifdef FG_READ_WAIT_REACTOR
namespace {

using boost::asio::detail::epoll_reactor;
using socket_type = boost::asio::ip::tcp::socket;

// The socket's implementation (basic_socket::impl_, protected): a pointer to it formed
// in a class derived from the socket.
struct socket_access : socket_type {
  static auto& impl(socket_type& s) { return s.*(&socket_access::impl_); }
};

// The descriptor state's try_speculative_ flags (private). An explicit instantiation may
// name a private member ([temp.spec.general]); the friend it defines hands the pointer out.
struct speculative_flags {
  using type = bool (epoll_reactor::descriptor_state::*)[epoll_reactor::max_ops];
  friend type member(speculative_flags);
};
template <class Tag, typename Tag::type M>
struct expose {
  friend typename Tag::type member(Tag) { return M; }
};
template struct expose<speculative_flags, &epoll_reactor::descriptor_state::try_speculative_>;

bool* read_flag(socket_type& s) {
  epoll_reactor::descriptor_state* d = socket_access::impl(s).get_implementation().reactor_data_;
  return d ? &(d->*member(speculative_flags{}))[epoll_reactor::read_op] : nullptr;
}

}  // namespace

void read_waits_for_input(socket_type& s) {
  if (bool* f = read_flag(s)) *f = false;
}

bool read_tries_first(socket_type& s) {
  const bool* f = read_flag(s);
  return f && *f;
}
#else
void read_waits_for_input(boost::asio::ip::tcp::socket&) {}
bool read_tries_first(boost::asio::ip::tcp::socket&) { return true; }
#endif

}  // namespace fg::net
