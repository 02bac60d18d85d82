#include "redis/cluster_map.hpp"

#include <algorithm>
#include <charconv>

namespace fg::redis {

namespace {

using parsed = boost::system::result<cluster_map, std::string>;

// The "ip" of a node's metadata (Redis 7: [key, value, ...] after host, port and id).
std::optional<std::string> metadata_ip(const reply& node) {
  if (node.elements.size() < 4 || node.elements[3].type != reply::kind::array) return std::nullopt;
  const auto& meta = node.elements[3].elements;
  for (std::size_t i = 0; i + 1 < meta.size(); i += 2)
    if (meta[i].str == "ip" && meta[i + 1].type == reply::kind::string && !meta[i + 1].str.empty())
      return meta[i + 1].str;
  return std::nullopt;
}

boost::system::result<cluster_node, std::string> read_node(const reply& r, const config::endpoint& asked) {
  // [host, port, id, metadata...]: the id since 4.0, the metadata (hostname) since 7.0.
  if (r.type != reply::kind::array || r.elements.size() < 2) return {boost::system::in_place_error, "a node is not [host, port, ...]"};
  const auto& host = r.elements[0];
  const auto& port = r.elements[1];
  if (host.type != reply::kind::string && host.type != reply::kind::nil)
    return {boost::system::in_place_error, "a node's host is not a string"};
  if (port.type != reply::kind::integer || port.integer <= 0 || port.integer > 65535)
    return {boost::system::in_place_error, "a node's port is not in 1..65535"};
  cluster_node n;
  n.address.host = host.str;
  // No preferred endpoint (unknown-endpoint, or a hostname not known yet): Redis 7 names
  // the IP in the node's metadata when it can; else it is the node asked (a lone node).
  if (n.address.host.empty() || n.address.host == "?") n.address.host = metadata_ip(r).value_or(asked.host);
  n.address.port = static_cast<std::uint16_t>(port.integer);
  if (r.elements.size() > 2 && r.elements[2].type == reply::kind::string) n.id = r.elements[2].str;
  return n;
}

boost::system::result<slot_range, std::string> read_range(const reply& r, const config::endpoint& asked) {
  if (r.type != reply::kind::array || r.elements.size() < 3)
    return {boost::system::in_place_error, "a range is not [first, last, master, replicas...]"};
  const auto& first = r.elements[0];
  const auto& last = r.elements[1];
  if (first.type != reply::kind::integer || last.type != reply::kind::integer || first.integer < 0 ||
      first.integer > last.integer || last.integer >= slot_count)
    return {boost::system::in_place_error, "a range's slots are not first <= last < 16384"};
  slot_range out;
  out.first = static_cast<std::uint16_t>(first.integer);
  out.last = static_cast<std::uint16_t>(last.integer);
  for (std::size_t i = 2; i < r.elements.size(); ++i) {
    auto n = read_node(r.elements[i], asked);
    if (!n) return {boost::system::in_place_error, n.error()};
    if (i == 2)
      out.master = std::move(*n);
    else
      out.replicas.push_back(std::move(*n));
  }
  return out;
}

}  // namespace

parsed cluster_map::parse(const reply& r, const config::endpoint& asked) {
  if (r.is_error()) return {boost::system::in_place_error, "CLUSTER SLOTS failed: " + r.str};
  if (r.type != reply::kind::array) return {boost::system::in_place_error, "CLUSTER SLOTS did not answer an array"};
  cluster_map map;
  for (const auto& e : r.elements) {
    auto range = read_range(e, asked);
    if (!range) return {boost::system::in_place_error, range.error()};
    map.ranges_.push_back(std::move(*range));
  }
  std::sort(map.ranges_.begin(), map.ranges_.end(),
            [](const slot_range& a, const slot_range& b) { return a.first < b.first; });
  map.master_of_slot_.assign(slot_count, none);
  for (std::size_t i = 0; i < map.ranges_.size(); ++i) {
    const auto& range = map.ranges_[i];
    if (i > 0 && range.first <= map.ranges_[i - 1].last)
      return {boost::system::in_place_error, "ranges overlap at slot " + std::to_string(range.first)};
    auto known = std::find(map.masters_.begin(), map.masters_.end(), range.master);
    if (known == map.masters_.end()) known = map.masters_.insert(map.masters_.end(), range.master);
    auto index = static_cast<std::uint16_t>(known - map.masters_.begin());
    std::fill(map.master_of_slot_.begin() + range.first, map.master_of_slot_.begin() + range.last + 1, index);
    map.covered_ += range.last - range.first + 1u;
  }
  return map;
}

parsed cluster_map::parse(const redisReply* r, const config::endpoint& asked) {
  if (!r) return {boost::system::in_place_error, "no reply"};
  return parse(reply::from(r), asked);
}

const cluster_node* cluster_map::master_for(std::uint16_t slot) const {
  if (slot >= master_of_slot_.size() || master_of_slot_[slot] == none) return nullptr;
  return &masters_[master_of_slot_[slot]];
}

namespace {

bool starts_with_word(std::string_view s, std::string_view word) {
  return s.size() >= word.size() && s.substr(0, word.size()) == word &&
         (s.size() == word.size() || s[word.size()] == ' ');
}

template <typename T>
std::optional<T> to_number(std::string_view s) {
  T v{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// "host:port", "[v6]:port", bare "v6:port" (the port after the last colon) or ":port".
std::optional<config::endpoint> read_address(std::string_view s, const config::endpoint& asked) {
  auto colon = s.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  auto port = to_number<std::uint16_t>(s.substr(colon + 1));
  if (!port || *port == 0) return std::nullopt;
  auto host = s.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.find_first_of("[] ") != std::string_view::npos) return std::nullopt;
  // Empty: Redis 7's unknown endpoint; "?": a preferred hostname the node does not know.
  if (host.empty() || host == "?") host = asked.host;
  return config::endpoint{std::string(host), *port};
}

}  // namespace

std::optional<redirect> parse_redirect(std::string_view error, const config::endpoint& asked) {
  redirect out;
  if (starts_with_word(error, "MOVED")) {
    error.remove_prefix(5);
  } else if (starts_with_word(error, "ASK")) {
    error.remove_prefix(3);
    out.type = redirect::kind::ask;
  } else {
    return std::nullopt;
  }
  if (error.empty() || error.front() != ' ') return std::nullopt;
  error.remove_prefix(1);
  auto space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  auto slot = to_number<std::uint16_t>(error.substr(0, space));
  if (!slot || *slot >= slot_count) return std::nullopt;
  auto address = read_address(error.substr(space + 1), asked);
  if (!address) return std::nullopt;
  out.slot = *slot;
  out.address = std::move(*address);
  return out;
}

std::vector<config::endpoint> node_addresses(std::string_view text, const config::endpoint& asked, std::size_t at_most) {
  std::vector<config::endpoint> out;
  while (!text.empty() && out.size() < at_most) {
    auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    // "<id> <ip:port@cport[,hostname]> <flags> ...": the second and third fields.
    auto a = line.find(' ');
    if (a == std::string_view::npos) continue;
    auto b = line.find(' ', a + 1);
    if (b == std::string_view::npos) continue;
    auto address = line.substr(a + 1, b - a - 1);
    auto c = line.find(' ', b + 1);
    auto flags = line.substr(b + 1, c == std::string_view::npos ? std::string_view::npos : c - b - 1);
    // Not a node to send anything to: failed, still joining, or of no known address.
    bool usable = true;
    for (std::string_view bad : {"fail", "handshake", "noaddr"})
      for (std::size_t at = 0; (at = flags.find(bad, at)) != std::string_view::npos; at += bad.size()) {
        const bool starts = at == 0 || flags[at - 1] == ',';
        const bool ends = at + bad.size() == flags.size() || flags[at + bad.size()] == ',';
        if (starts && ends) usable = false;
      }
    if (!usable) continue;
    address = address.substr(0, address.find('@'));
    if (auto ep = read_address(address, asked)) out.push_back(std::move(*ep));
  }
  return out;
}

cluster_error classify_error(std::string_view error) {
  if (starts_with_word(error, "MOVED")) return cluster_error::moved;
  if (starts_with_word(error, "ASK")) return cluster_error::ask;
  if (starts_with_word(error, "TRYAGAIN")) return cluster_error::try_again;
  if (starts_with_word(error, "CLUSTERDOWN")) return cluster_error::cluster_down;
  if (starts_with_word(error, "CROSSSLOT")) return cluster_error::cross_slot;
  return cluster_error::none;
}

}  // namespace fg::redis
