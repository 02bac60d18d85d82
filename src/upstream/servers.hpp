#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "config/config.hpp"

// The servers of every upstream as the whole process sees them: each server's passive
// health (failures in a row, ejection), its requests in flight (least_conn, the retry
// budget) and its counters (metrics, GET /upstreams). Shared by all workers and read by
// the admin listener, so every field is atomic; rebuilt on reload, a server that stays
// keeps its state. Choosing a server (pick) is pure over that state and a worker's own
// round-robin position.
namespace fg::tls {
class client_context;
}

namespace fg::upstream {

using steady = std::chrono::steady_clock;

enum class failure_kind : std::uint8_t { none, connect, reset, timeout, status };
const char* describe(failure_kind k);

struct server_health {
  std::atomic<unsigned> failures_in_row{0};
  // Ejections since the last success: each one lasts twice the one before.
  std::atomic<unsigned> ejections_in_row{0};
  std::atomic<std::int64_t> ejected_until{0};  // steady clock, ns; 0 or past: in service
  std::atomic<std::int64_t> active{0};         // requests in flight
  std::atomic<std::uint64_t> requests{0}, failures{0}, ejections{0}, retries{0};
  // What ejected it last (for GET /upstreams).
  std::atomic<failure_kind> last_failure{failure_kind::none};
  std::atomic<unsigned> last_status{0};

  // Active health (upstreams.<name>.health): out of service after `fall` failed checks
  // in a row, until `rise` passes in a row; what the last failed check found.
  std::atomic<bool> check_failing{false};
  // Checks passed and failed in a row: the server's, kept through reloads and address
  // changes that keep it (written by the checker's thread only).
  std::atomic<unsigned> check_passes_in_row{0}, check_fails_in_row{0};
  std::atomic<std::uint64_t> checks{0}, check_failures{0};
  std::atomic<failure_kind> check_last{failure_kind::none};
  std::atomic<unsigned> check_status{0};

  bool ejected(steady::time_point now) const {
    return ejected_until.load(std::memory_order_relaxed) > now.time_since_epoch().count();
  }
  // Neither ejected (passive health) nor failing its checks (active health).
  bool in_service(steady::time_point now) const {
    return !ejected(now) && !check_failing.load(std::memory_order_relaxed);
  }
};

struct server {
  config::upstream_server cfg;
  std::string address;  // "host:port", for logs and labels
  std::shared_ptr<server_health> health;
};

struct upstream_servers {
  std::string name;
  config::health_check_config health;
  config::balance balance = config::balance::round_robin;
  std::vector<server> servers;
  config::eject_config eject;
  config::retry_budget budget;
  std::uint64_t weight_total = 0;
  // Retries in flight on this upstream (the budget).
  std::shared_ptr<std::atomic<std::int64_t>> retrying = std::make_shared<std::atomic<std::int64_t>>(0);
  // Held while a server is ejected, so that two workers never pass max_share together.
  std::shared_ptr<std::mutex> ejecting = std::make_shared<std::mutex>();
  // TLS to its servers (upstreams.<name>.tls; null: plain TCP).
  std::shared_ptr<const tls::client_context> tls;
  bool h2 = false;  // protocol: h2 (its health check is an HTTP/2 request)
};

// Every upstream's servers, in the configuration's order.
class server_set {
 public:
  // `previous`: the set before a reload (servers kept by upstream name and address keep
  // their health and counters). `tls`: each upstream's client side, by index (or none).
  static std::shared_ptr<const server_set> build(
      const std::vector<config::upstream_config>& upstreams, const server_set* previous,
      std::span<const std::shared_ptr<const tls::client_context>> tls = {});
  const upstream_servers& of(std::size_t upstream_index) const { return upstreams_[upstream_index]; }
  std::span<const upstream_servers> all() const { return upstreams_; }

 private:
  std::vector<upstream_servers> upstreams_;
};

// A worker's own round-robin position in one upstream (nginx's smooth weighted round
// robin: each pick adds every server's weight to its current value, takes the largest
// and takes the total off it).
struct pick_state {
  std::vector<std::int64_t> current;
  std::size_t next = 0;  // least_conn's tie-break
};

struct pick_input {
  config::balance balance = config::balance::round_robin;
  std::optional<std::uint64_t> key_hash;  // balance: hash, when the request has the key
  std::span<const std::size_t> tried;     // servers this request already failed on
  steady::time_point now;
};

// The server for one try, or nullopt when every server has been tried. Servers out of
// service (ejected, or failing their health checks) are passed over while another is in
// service; when all untried ones are out, the balance picks among them anyway (a guess
// beats a certain 502).
std::optional<std::size_t> pick(const upstream_servers& u, pick_state& st, const pick_input& in);

// A weighted rendezvous hash: the server with the highest weight / -ln(h(key, server)).
// Removing a server moves only its keys; adding one moves about its share.
std::size_t hash_pick(const upstream_servers& u, std::uint64_t key_hash, std::span<const char> eligible);

// What a try came to. A failure may eject the server (true: it did, now; logged); a
// success after an ejection brings it back (true: logged as back in service), unless it
// came while the server is still ejected (a request sent before the ejection).
bool note_failure(const upstream_servers& u, std::size_t i, failure_kind why, unsigned status, steady::time_point now);
bool note_success(const upstream_servers& u, std::size_t i, steady::time_point now);
// Whether `status` from server i counts against it (eject.statuses).
bool ejecting_status(const upstream_servers& u, unsigned status);

// A retry on another server is allowed while retries in flight stay under the budget:
// max(budget.min, budget.share x requests in flight on the upstream).
bool retry_allowed(const upstream_servers& u);

}  // namespace fg::upstream
