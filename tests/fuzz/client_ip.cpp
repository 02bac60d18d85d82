// Client-IP resolution: X-Forwarded-For, Forwarded (RFC 7239) and a single-address
// header from a trusted peer, and what is forwarded upstream. The input is lines:
// the first chooses the peer and flags, the others are header values in turn.
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_input.hpp"
#include "net/client_ip.hpp"

using namespace fg::net;

namespace {

const client_ip_resolver& resolver(bool trust_all, unsigned prefix) {
  static const auto make = [](bool all, unsigned p) {
    cidr_set trusted;
    for (const char* c : all ? std::vector<const char*>{"0.0.0.0/0", "::/0"}
                             : std::vector<const char*>{"10.0.0.0/8", "fd00::/8", "127.0.0.1/32"})
      trusted.add(*parse_cidr(c));
    return client_ip_resolver(std::move(trusted), {"X-Forwarded-For", "Forwarded", "X-Real-IP"}, p);
  };
  static const client_ip_resolver r[4] = {make(false, 128), make(true, 128), make(false, 64), make(true, 48)};
  return r[(trust_all ? 1 : 0) + (prefix < 128 ? 2 : 0)];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fg::fuzz::input in(data, size);
  const auto flags = in.byte();
  static const char* peers[] = {"10.1.2.3", "203.0.113.9", "fd00::1", "2001:db8::1", "127.0.0.1", "::ffff:10.0.0.1"};
  const auto peer_text = peers[flags % 6];
  const auto peer = parse_forwarded_address(peer_text);
  if (!peer) std::abort();
  const auto& r = resolver(flags & 8, (flags & 16) ? 64 : 128);
  static const char* names[] = {"X-Forwarded-For", "Forwarded", "X-Real-IP", "x-forwarded-for", "Other"};
  // Values as they reach the resolver: the head scanner (http/framing.hpp) has refused
  // every head with a control byte but HTAB in it, so none is here either.
  std::vector<header_field> fields;
  for (unsigned i = 0; !in.empty() && i < 16; ++i) {
    auto v = in.line();
    for (unsigned char c : v)
      if ((c < 0x20 && c != '\t') || c == 0x7f) return 0;
    fields.push_back({names[i % 5], v});
  }
  const auto p = fg::net::normalize(*peer);
  const auto text = p.to_string();
  const auto key = r.key_of(p);
  const std::span<const header_field> listed(fields);
  fg::net::client_view view;
  r.resolve({p, text, key}, fg::net::listed_fields(listed), flags & 32, view);
  if (view.who.key.empty()) std::abort();
  // Nothing forwarded may break a header line.
  for (const auto& v : {view.xff, view.forwarded})
    if (v.find_first_of("\r\n") != std::string::npos || v.find('\0') != std::string::npos) std::abort();
  std::vector<std::string_view> fors;
  for (const auto& f : fields) forwarded_for_values(f.value, fors);
  for (const auto& f : fields) (void)parse_forwarded_address(f.value);
  return 0;
}
