#pragma once
#include <boost/asio/ip/address.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"

// Upstream servers given by name: each of a name's addresses is a server of its own,
// resolved through c-ares (the name servers of resolver.servers, or the system's) away
// from any request, asked again every resolver.refresh, and kept at their last good
// answer when a name fails.
namespace fg::upstream {

using ip_address = boost::asio::ip::address;

// The addresses of each name, as last resolved without error (sorted, at most
// caps::addresses_per_name).
using dns_answers = std::map<std::string, std::vector<ip_address>, std::less<>>;

struct dns_answer {
  std::vector<ip_address> addresses;  // sorted, duplicates removed
  std::string error;                  // "" = resolved (with at least one address)
};

// Resolves every name at once (A and AAAA; /etc/hosts first, then the name servers). Blocks the calling thread for at most about rc.timeout x rc.tries, less if
// `stop` becomes true.
std::vector<dns_answer> resolve_names(const config::resolver_config& rc, std::span<const std::string> names,
                                      const std::atomic<bool>* stop = nullptr);

// The host names (not IP literals) among the servers of `upstreams`, each once.
std::vector<std::string> server_names(const std::vector<config::upstream_config>& upstreams);

// `upstreams` with each named server replaced by one server per address of its name in
// `answers` (the configured port and weight, `name` set), a name without an answer
// giving none; at most caps::servers per upstream (an address listed twice is kept once).
std::vector<config::upstream_config> expand(const std::vector<config::upstream_config>& upstreams,
                                            const dns_answers& answers);

// Keeps the names of the configuration resolved, on a thread of its own: each name again
// every rc.refresh, one that failed again after 1 s, 2 s, 4 s... (at most refresh), its
// last good addresses kept meanwhile (logged). `changed` runs on that thread when a
// name's addresses have changed.
class dns_refresher {
 public:
  dns_refresher() = default;
  ~dns_refresher() { stop(); }
  dns_refresher(const dns_refresher&) = delete;
  dns_refresher& operator=(const dns_refresher&) = delete;

  // The names (and resolver settings) to keep resolved from now on. Names it has no
  // answer for yet are resolved first, on the calling thread (bounded as resolve_names),
  // so that a configuration starts with their addresses. Starts the thread on first use
  // with names; `changed` is kept from the first call.
  void set(const config::resolver_config& rc, std::vector<std::string> names, std::function<void()> changed);
  dns_answers answers() const;
  void stop();

 private:
  struct entry {
    std::vector<ip_address> addresses;
    bool resolved = false;  // has had a good answer
    unsigned failures = 0;  // in a row
    std::chrono::steady_clock::time_point due{};
  };
  // Applies the answers of `names`; true if some name's addresses changed.
  bool apply(std::span<const std::string> names, std::span<const dns_answer> got,
             std::chrono::steady_clock::time_point now);
  void loop();

  mutable std::mutex mu_;
  std::condition_variable wake_;
  config::resolver_config rc_;
  std::map<std::string, entry, std::less<>> names_;
  std::function<void()> changed_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace fg::upstream
