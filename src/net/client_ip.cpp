#include "net/client_ip.hpp"

#include "util/text.hpp"

#include <boost/asio/ip/network_v6.hpp>

#include <algorithm>

namespace fg::net {
using util::iequals;
using util::trim;

namespace {

// Splits on commas outside quoted strings (with `quotes`; X-Forwarded-For has no
// quoted-string syntax, and honouring quotes there would let a client's unbalanced
// '"' swallow the entry its proxy appended).
template <class F>
void split_list(std::string_view v, F&& each, bool quotes = true) {
  std::size_t start = 0;
  bool quoted = false;
  for (std::size_t i = 0; i <= v.size(); ++i) {
    if (quotes && i < v.size() && v[i] == '"') quoted = !quoted;
    if (i < v.size() && v[i] == '\\' && quoted) {
      ++i;
      continue;
    }
    if (i == v.size() || (v[i] == ',' && !quoted)) {
      each(trim(v.substr(start, i - start)));
      start = i + 1;
    }
  }
}

}  // namespace

namespace {
// Each element of a Forwarded value with its for= value ("" where it has none).
template <class F>
void forwarded_elements(std::string_view value, F&& each) {
  split_list(value, [&](std::string_view element) {
    std::string_view for_value;
    bool found = false;
    // pairs separated by ';' (outside quotes)
    std::size_t start = 0;
    bool quoted = false;
    for (std::size_t i = 0; i <= element.size(); ++i) {
      if (i < element.size() && element[i] == '"') quoted = !quoted;
      if (i == element.size() || (element[i] == ';' && !quoted)) {
        auto pair = trim(element.substr(start, i - start));
        auto eq = pair.find('=');
        if (eq != std::string_view::npos && iequals(trim(pair.substr(0, eq)), "for") && !found) {
          for_value = trim(pair.substr(eq + 1));
          found = true;
        }
        start = i + 1;
      }
    }
    // An element without for= still is a hop: keep its place so the walk stops there.
    each(element, found ? for_value : std::string_view());
  });
}
}  // namespace

void forwarded_for_values(std::string_view value, std::vector<std::string_view>& out) {
  forwarded_elements(value, [&](std::string_view, std::string_view for_value) { out.push_back(for_value); });
}

client_ip_resolver::client_ip_resolver(cidr_set trusted, std::vector<std::string> headers, unsigned ipv6_prefix)
    : trusted_(std::move(trusted)), headers_(std::move(headers)), ipv6_prefix_(ipv6_prefix) {
  for (const auto& h : headers_) {
    if (iequals(h, "X-Forwarded-For")) kinds_.push_back(kind::xff);
    else if (iequals(h, "Forwarded")) kinds_.push_back(kind::forwarded);
    else kinds_.push_back(kind::single);
  }
  fields_ = headers_;
  for (std::string_view extra : {"X-Forwarded-For", "Forwarded"})
    if (std::none_of(fields_.begin(), fields_.end(), [&](const auto& h) { return iequals(h, extra); }))
      fields_.emplace_back(extra);
}

field_reader listed_fields(const std::span<const header_field>& fields) {
  return {[](const void* ctx, std::span<const std::string> names, std::vector<header_field>& out) {
            for (const auto& f : *static_cast<const std::span<const header_field>*>(ctx))
              if (std::any_of(names.begin(), names.end(), [&](const auto& n) { return iequals(f.name, n); }))
                out.push_back(f);
          },
          &fields};
}

void client_view::release_memory() {
  for (auto* s : {&who.key, &who_text, &xff, &forwarded}) std::string().swap(*s);
  std::vector<header_field>().swap(fields);
}

void client_ip_resolver::resolve(const peer_info& peer, field_reader read, bool full, client_view& out) const {
  out.peer_trusted = trusted_.contains(peer.ip);
  out.xff.clear();
  out.forwarded.clear();
  out.who_text.clear();
  out.fields.clear();
  if (!out.peer_trusted) {
    out.who.ip = peer.ip;
    out.who.key.assign(peer.key);
    out.who.from_header = false;
    return;
  }
  // All of them (the head's size bounds them): the last ones are what our proxy wrote,
  // and a cap keeping the first would let a client push those out of sight.
  read.read(read.ctx, fields_, out.fields);
  out.who = from_headers(peer, out.fields);
  chains(peer.text, out.fields, out.who, full, out.xff, out.forwarded);
  if (out.who.from_header) out.who_text = out.who.ip.to_string();
}

std::optional<address> client_ip_resolver::from_list(std::span<const header_field> fields, std::string_view name,
                                                     kind k) const {
  if (k == kind::single) {
    // One value expected; the last occurrence is the one our proxy set.
    std::optional<address> found;
    for (const auto& f : fields)
      if (iequals(f.name, name)) found = parse_forwarded_address(f.value);
    return found;
  }
  std::vector<std::string_view> hops;
  for (const auto& f : fields) {
    if (!iequals(f.name, name)) continue;
    if (k == kind::xff) split_list(f.value, [&](std::string_view v) { hops.push_back(v); }, false);
    else forwarded_for_values(f.value, hops);
  }
  auto i = client_hop(hops, k == kind::xff);
  if (i < 0) return std::nullopt;
  return parse_forwarded_address(hops[static_cast<std::size_t>(i)]);
}

std::ptrdiff_t client_ip_resolver::client_hop(std::span<const std::string_view> hops, bool skip_empty) const {
  // Right to left: skip our own proxies; the first untrusted hop is the client. A hop
  // that is not an address ("unknown", obfuscated) ends the walk: what lies to its left
  // was written by a party no trusted proxy vouched for.
  std::ptrdiff_t leftmost_trusted = -1;
  for (auto i = static_cast<std::ptrdiff_t>(hops.size()) - 1; i >= 0; --i) {
    const auto hop = hops[static_cast<std::size_t>(i)];
    if (skip_empty && trim(hop).empty()) continue;  // "a, , b" or a trailing comma
    auto a = parse_forwarded_address(hop);
    if (!a) return -1;
    if (!trusted_.contains(*a)) return i;
    leftmost_trusted = i;
  }
  return leftmost_trusted;
}

// The peer is trusted (resolve() checked).
void client_ip_resolver::chains(std::string_view peer_text, std::span<const header_field> fields,
                                const client_identity& who, bool full, std::string& xff, std::string& forwarded) const {
  auto join = [](std::string& out, std::string_view piece) {
    if (!out.empty()) out.append(", ");
    out.append(piece);
  };
  std::vector<std::string_view> hops;
  for (const auto& f : fields)
    if (iequals(f.name, "X-Forwarded-For")) split_list(f.value, [&](std::string_view v) { hops.push_back(v); }, false);
  if (full) {
    for (auto h : hops)
      if (!h.empty()) join(xff, h);
    join(xff, peer_text);
    for (const auto& f : fields)
      if (iequals(f.name, "Forwarded")) join(forwarded, trim(f.value));
    return;
  }
  // From the client on: what lies to its left is the client's own say.
  auto i = client_hop(hops, true);
  auto at = i < 0 ? std::optional<address>() : parse_forwarded_address(hops[static_cast<std::size_t>(i)]);
  if (at && *at == who.ip) {
    for (auto j = static_cast<std::size_t>(i); j < hops.size(); ++j)
      if (auto a = parse_forwarded_address(hops[j])) join(xff, a->to_string());
  } else if (who.from_header) {
    xff = who.ip.to_string();
  }
  join(xff, peer_text);
  std::vector<std::string_view> elements, fors;
  for (const auto& f : fields)
    if (iequals(f.name, "Forwarded"))
      forwarded_elements(f.value, [&](std::string_view e, std::string_view v) { elements.push_back(e), fors.push_back(v); });
  auto k = client_hop(fors, false);
  auto fat = k < 0 ? std::optional<address>() : parse_forwarded_address(fors[static_cast<std::size_t>(k)]);
  if (fat && *fat == who.ip)
    for (auto j = static_cast<std::size_t>(k); j < elements.size(); ++j) join(forwarded, elements[j]);
}

// The peer is trusted (resolve() checked).
client_identity client_ip_resolver::from_headers(const peer_info& peer, std::span<const header_field> fields) const {
  for (std::size_t i = 0; i < headers_.size(); ++i)
    if (auto a = from_list(fields, headers_[i], kinds_[i])) return {*a, key_of(*a), true};
  return {peer.ip, std::string(peer.key), false};
}

std::string client_ip_resolver::key_of(const address& a) const {
  if (a.is_v6() && ipv6_prefix_ < 128) {
    boost::asio::ip::network_v6 net(a.to_v6(), ipv6_prefix_);
    return net.canonical().to_string();
  }
  return a.to_string();
}

std::string client_ip_resolver::key_of(const address& a, std::string_view text) const {
  if (a.is_v6() && ipv6_prefix_ < 128) return key_of(a);
  return std::string(text);
}

}  // namespace fg::net
