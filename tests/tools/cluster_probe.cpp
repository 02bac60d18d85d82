// floodgate-cluster-probe: floodgate's cluster pieces driven from the integration tests
// (tests/integration/test_cluster_groundwork.py), so that they are checked against a
// real Redis Cluster.
//   floodgate-cluster-probe slots               one key per stdin line -> its slot per line
//   floodgate-cluster-probe map HOST PORT       CLUSTER SLOTS of HOST:PORT, as parsed
//   floodgate-cluster-probe redirect HOST PORT  one error text per stdin line -> the redirection
#include <hiredis/hiredis.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "redis/cluster_map.hpp"
#include "redis/slots.hpp"

namespace {

int slots() {
  std::string key;
  while (std::getline(std::cin, key)) std::cout << fg::redis::key_slot(key) << '\n';
  return 0;
}

// range FIRST LAST MASTER [REPLICA...] per range, master ADDRESS ID per master, covered N.
int map(const fg::config::endpoint& seed) {
  timeval timeout{5, 0};
  std::unique_ptr<redisContext, decltype(&redisFree)> c(
      redisConnectWithTimeout(seed.host.c_str(), seed.port, timeout), &redisFree);
  if (!c || c->err) {
    std::cerr << "connect " << seed.str() << ": " << (c ? c->errstr : "no memory") << '\n';
    return 2;
  }
  auto* r = static_cast<redisReply*>(redisCommand(c.get(), "CLUSTER SLOTS"));
  if (!r) {
    std::cerr << "CLUSTER SLOTS: " << c->errstr << '\n';
    return 2;
  }
  auto parsed = fg::redis::cluster_map::parse(r, seed);
  freeReplyObject(r);
  if (!parsed) {
    std::cerr << parsed.error() << '\n';
    return 1;
  }
  for (const auto& range : parsed->ranges()) {
    std::cout << "range " << range.first << ' ' << range.last << ' ' << range.master.address.str();
    for (const auto& replica : range.replicas) std::cout << ' ' << replica.address.str();
    std::cout << '\n';
  }
  for (const auto& m : parsed->masters()) std::cout << "master " << m.address.str() << ' ' << m.id << '\n';
  std::cout << "covered " << parsed->covered() << '\n';
  return 0;
}

// KIND SLOT ADDRESS per line, or "none".
int redirects(const fg::config::endpoint& asked) {
  std::string line;
  while (std::getline(std::cin, line)) {
    auto r = fg::redis::parse_redirect(line, asked);
    if (!r)
      std::cout << "none\n";
    else
      std::cout << (r->type == fg::redis::redirect::kind::ask ? "ask " : "moved ") << r->slot << ' '
                << r->address.str() << '\n';
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "slots" && argc == 2) return slots();
  if ((mode == "map" || mode == "redirect") && argc == 4) {
    fg::config::endpoint ep{argv[2], static_cast<std::uint16_t>(std::stoi(argv[3]))};
    return mode == "map" ? map(ep) : redirects(ep);
  }
  std::fprintf(stderr, "usage: %s slots | map HOST PORT | redirect HOST PORT\n", argv[0]);
  return 2;
}
