#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "net/cidr.hpp"

namespace fg::net {

struct header_field {
  std::string_view name;
  std::string_view value;
};

struct client_identity {
  address ip;       // the client as resolved
  std::string key;  // its identity for limits ("1.2.3.4", or "2001:db8::/64" with ipv6_prefix)
  bool from_header = false;
};

// Who is the client? The socket peer, unless the peer is a trusted proxy; then the
// configured forwarding headers are consulted in order. Pure: no I/O, no allocation
// beyond the result.
class client_ip_resolver {
 public:
  client_ip_resolver() = default;
  client_ip_resolver(cidr_set trusted, std::vector<std::string> headers, unsigned ipv6_prefix);

  bool is_trusted(const address& peer) const { return trusted_.contains(peer); }
  const std::vector<std::string>& headers() const { return headers_; }

  // `fields`: the request's header fields (any order; only configured names are read).
  client_identity resolve(const address& peer, std::span<const header_field> fields) const;

  // What the upstream is told about the client: the X-Forwarded-For and Forwarded values
  // to send ("" = none). `full`: the trusted proxy's chain as it came, with the peer
  // appended to X-Forwarded-For; else each chain starts at the client `who` (as this
  // resolver found it in that header) and X-Forwarded-For ends with the peer. Nothing
  // an untrusted peer wrote is kept.
  void forwarding(const address& peer, std::string_view peer_text, std::span<const header_field> fields,
                  const client_identity& who, bool full, std::string& xff, std::string& forwarded) const;

  // The identity key of an address after ipv6_prefix.
  std::string key_of(const address& a) const;

 private:
  enum class kind { xff, forwarded, single };
  std::optional<address> from_list(std::span<const header_field> fields, std::string_view name, kind k) const;
  // The right-to-left walk: the index of the client's hop in `hops`, or -1.
  std::ptrdiff_t client_hop(std::span<const std::string_view> hops, bool skip_empty) const;

  cidr_set trusted_;
  std::vector<std::string> headers_;
  std::vector<kind> kinds_;
  unsigned ipv6_prefix_ = 128;
};

// The `for=` values of RFC 7239 Forwarded elements, in order (several header lines concatenated).
void forwarded_for_values(std::string_view value, std::vector<std::string_view>& out);

}  // namespace fg::net
