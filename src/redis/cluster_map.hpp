#pragma once
#include <boost/system/result.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "redis/reply.hpp"
#include "redis/slots.hpp"

struct redisReply;

namespace fg::redis {

// One node as CLUSTER SLOTS names it.
struct cluster_node {
  config::endpoint address;
  std::string id;  // the node ID (empty from servers older than 4.0)
  bool operator==(const cluster_node&) const = default;
};

// Slots first..last (inclusive), served by `master`, copied to `replicas`.
struct slot_range {
  std::uint16_t first = 0;
  std::uint16_t last = 0;
  cluster_node master;
  std::vector<cluster_node> replicas;
};

// Which master serves each slot: a CLUSTER SLOTS answer, read once, looked up per
// command. Slots no range names (a cluster being set up, or failing) have no master.
class cluster_map {
 public:
  // `asked` is the node the reply came from. A node without an address (an empty host,
  // "?" or nil: Redis 7's unknown endpoint, or a preferred hostname not known) is at the
  // "ip" of its metadata when Redis gives one, else it is `asked` (a node alone).
  // Anything but a well-formed answer (an error reply, a bad range or node, overlapping
  // ranges) is an error saying what was wrong.
  static boost::system::result<cluster_map, std::string> parse(const reply& r, const config::endpoint& asked);
  static boost::system::result<cluster_map, std::string> parse(const redisReply* r, const config::endpoint& asked);

  // The master serving `slot`, or nullptr when none does (or slot >= slot_count).
  const cluster_node* master_for(std::uint16_t slot) const;
  const cluster_node* master_for_key(std::string_view key) const { return master_for(key_slot(key)); }
  // The distinct masters, in the order of the first slot each serves.
  const std::vector<cluster_node>& masters() const { return masters_; }
  // The ranges, sorted by first slot, none overlapping.
  const std::vector<slot_range>& ranges() const { return ranges_; }
  // How many of the slot_count slots have a master.
  std::size_t covered() const { return covered_; }
  bool complete() const { return covered_ == slot_count; }

 private:
  static constexpr std::uint16_t none = 0xffff;
  std::vector<slot_range> ranges_;
  std::vector<cluster_node> masters_;
  // Per slot: an index into masters_, or `none`.
  std::vector<std::uint16_t> master_of_slot_;
  std::size_t covered_ = 0;
};

// A cluster redirection: the key's slot lives elsewhere (MOVED: for good, update the
// map; ASK: for this command only, send ASKING first).
struct redirect {
  enum class kind { moved, ask } type = kind::moved;
  std::uint16_t slot = 0;
  config::endpoint address;
  bool operator==(const redirect&) const = default;
};

// Reads "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>" (an error reply's
// text). The host may be an IPv6 address, bare ("::1:7000", as Redis writes it) or in
// brackets ("[::1]:7000"); an empty host (":7000", Redis 7's unknown endpoint) or "?"
// ("?:7000", a preferred hostname the node does not know) means `asked`'s host: a guess
// that a refresh of the map corrects. Any other text, or a malformed redirection: nullopt.
std::optional<redirect> parse_redirect(std::string_view error, const config::endpoint& asked);

// The addresses of the usable nodes in a CLUSTER NODES answer (masters with or without
// slots, replicas; not those flagged fail, handshake or noaddr), at most `at_most`:
// "<id> <ip:port@cport[,hostname]> <flags> ..." per line, an empty host meaning `asked`'s.
std::vector<config::endpoint> node_addresses(std::string_view text, const config::endpoint& asked, std::size_t at_most);

// What a cluster error reply asks of the client.
enum class cluster_error {
  none,         // not a cluster error: the command's own answer
  moved,        // refresh the map, retry at the new owner
  ask,          // ASKING + retry once at the named node, map unchanged
  try_again,    // TRYAGAIN: a multi-key command during resharding; retry after a pause
  cluster_down, // CLUSTERDOWN: the slot is not served; a store error, back off
  cross_slot    // CROSSSLOT: the command's keys span slots (floodgate's bug, never retried)
};
cluster_error classify_error(std::string_view error);

}  // namespace fg::redis
