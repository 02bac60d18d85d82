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

// A request's header fields as the resolver reads them, only from a trusted peer:
// `read(ctx, names, out)` appends every field whose name is one of `names`, in order.
struct field_reader {
  void (*read)(const void* ctx, std::span<const std::string> names, std::vector<header_field>& out);
  const void* ctx;
};
// A reader over fields already listed (tests, the fuzzer): the ones named, in order.
field_reader listed_fields(const std::span<const header_field>& fields);

// The peer of a connection: its (normalized) address, as text, and its identity key
// (key_of(ip), which a session keeps per configuration).
struct peer_info {
  const address& ip;
  std::string_view text;
  std::string_view key;
};

// The client of one request, resolved once: who it is (limits count `who.key`) and what
// the upstream is told about it. Kept per session and reused (strings keep capacity).
struct client_view {
  bool peer_trusted = false;
  client_identity who;
  std::string who_text;          // who.ip as text, when it came from a header
  std::string xff, forwarded;    // the chains for the upstream, when peer_trusted ("" = none)
  std::vector<header_field> fields;  // the identity fields the trusted peer sent
  void release_memory();
};

// Who is the client? The socket peer, unless the peer is a trusted proxy; then the
// configured forwarding headers are consulted in order. Pure: no I/O, no allocation
// beyond the result.
class client_ip_resolver {
 public:
  client_ip_resolver() = default;
  client_ip_resolver(cidr_set trusted, std::vector<std::string> headers, unsigned ipv6_prefix);

  // The header names read from a trusted proxy: the configured ones, then
  // X-Forwarded-For and Forwarded (whose chains are rebuilt for the upstream).
  const std::vector<std::string>& identity_fields() const { return fields_; }

  // The one resolution of a request's client: trust, identity and forwarding chains
  // together. Headers are read (through `fields`) only when the peer is trusted. `full`:
  // the trusted proxy's chain as it came, with the peer appended to X-Forwarded-For;
  // else each chain starts at the client (as found in that header) and X-Forwarded-For
  // ends with the peer. Nothing an untrusted peer wrote is kept.
  void resolve(const peer_info& peer, field_reader fields, bool full, client_view& out) const;

  // The identity key of an address after ipv6_prefix.
  std::string key_of(const address& a) const;
  // The same, given the address's text (a.to_string(), which a connection keeps): that
  // text unless an IPv6 prefix applies, without formatting the address again.
  std::string key_of(const address& a, std::string_view text) const;

 private:
  enum class kind { xff, forwarded, single };
  client_identity from_headers(const peer_info& peer, std::span<const header_field> fields) const;
  void chains(std::string_view peer_text, std::span<const header_field> fields, const client_identity& who, bool full,
              std::string& xff, std::string& forwarded) const;
  std::optional<address> from_list(std::span<const header_field> fields, std::string_view name, kind k) const;
  // The right-to-left walk: the index of the client's hop in `hops`, or -1.
  std::ptrdiff_t client_hop(std::span<const std::string_view> hops, bool skip_empty) const;

  cidr_set trusted_;
  std::vector<std::string> headers_;
  std::vector<std::string> fields_;
  std::vector<kind> kinds_;
  unsigned ipv6_prefix_ = 128;
};

// The `for=` values of RFC 7239 Forwarded elements, in order (several header lines concatenated).
void forwarded_for_values(std::string_view value, std::vector<std::string_view>& out);

}  // namespace fg::net
