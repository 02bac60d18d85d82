#include "upstream/servers.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "config/caps.hpp"
#include "util/text.hpp"

namespace fg::upstream {

const char* describe(failure_kind k) {
  switch (k) {
    case failure_kind::connect: return "connect failures";
    case failure_kind::reset: return "connections closed before a response";
    case failure_kind::timeout: return "timeouts";
    case failure_kind::status: return "failing statuses";
    case failure_kind::none: break;
  }
  return "none";
}

namespace {

// One of them, for "after 1 connect failure in a row".
const char* describe_one(failure_kind k) {
  switch (k) {
    case failure_kind::connect: return "connect failure";
    case failure_kind::reset: return "connection closed before a response";
    case failure_kind::timeout: return "timeout";
    case failure_kind::status: return "failing status";
    case failure_kind::none: break;
  }
  return "none";
}

}  // namespace

std::shared_ptr<const server_set> server_set::build(
    const std::vector<config::upstream_config>& upstreams, const server_set* previous,
    std::span<const std::shared_ptr<const tls::client_context>> tls) {
  auto out = std::make_shared<server_set>();
  for (const auto& u : upstreams) {
    upstream_servers us;
    us.name = u.name;
    if (const auto i = out->upstreams_.size(); i < tls.size()) us.tls = tls[i];
    us.balance = u.balance;
    us.eject = u.eject;
    us.budget = u.budget;
    us.health = u.health;
    us.h2 = u.proto == config::upstream_config::protocol::h2;
    const upstream_servers* old = nullptr;
    if (previous)
      for (const auto& p : previous->upstreams_)
        if (p.name == u.name) old = &p;
    if (old) {
      us.retrying = old->retrying;
      us.ejecting = old->ejecting;
    }
    for (const auto& s : u.servers) {
      server sv{s, s.address.str(), nullptr};
      if (old)
        for (const auto& o : old->servers)
          if (o.address == sv.address) sv.health = o.health;
      if (!sv.health) sv.health = std::make_shared<server_health>();
      // (a reload that turns the checks off puts a failing server back in service)
      if (!u.health.enabled) sv.health->check_failing.store(false, std::memory_order_relaxed);
      us.weight_total += s.weight;
      us.servers.push_back(std::move(sv));
    }
    out->upstreams_.push_back(std::move(us));
  }
  return out;
}

namespace {

bool was_tried(std::span<const std::size_t> tried, std::size_t i) {
  return std::find(tried.begin(), tried.end(), i) != tried.end();
}

std::size_t smooth_round_robin(const upstream_servers& u, pick_state& st, std::span<const char> eligible) {
  std::int64_t total = 0;
  std::size_t best = eligible.size();
  for (std::size_t i = 0; i < eligible.size(); ++i) {
    if (!eligible[i]) continue;
    const auto w = static_cast<std::int64_t>(u.servers[i].cfg.weight);
    st.current[i] += w;
    total += w;
    if (best == eligible.size() || st.current[i] > st.current[best]) best = i;
  }
  st.current[best] -= total;
  return best;
}

// Fewest requests in flight for its weight (active / weight, compared as products);
// ties go round, from where the last pick left off.
std::size_t least_conn(const upstream_servers& u, pick_state& st, std::span<const char> eligible) {
  const std::size_t n = eligible.size();
  std::size_t best = n;
  std::int64_t best_active = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = (st.next + k) % n;
    if (!eligible[i]) continue;
    const auto active = u.servers[i].health->active.load(std::memory_order_relaxed);
    if (best == n || active * static_cast<std::int64_t>(u.servers[best].cfg.weight) <
                         best_active * static_cast<std::int64_t>(u.servers[i].cfg.weight)) {
      best = i;
      best_active = active;
    }
  }
  st.next = (best + 1) % n;
  return best;
}

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::size_t hash_pick(const upstream_servers& u, std::uint64_t key_hash, std::span<const char> eligible) {
  std::size_t best = eligible.size();
  double best_score = -1;
  for (std::size_t i = 0; i < eligible.size(); ++i) {
    if (!eligible[i]) continue;
    // A uniform value in (0, 1) per (key, server), from the server's address (not its
    // position), so that a reload reordering the list moves no key.
    const auto h = mix(key_hash ^ util::fnv1a(u.servers[i].address));
    const double unit = (static_cast<double>(h >> 11) + 0.5) / 9007199254740992.0;  // 2^53
    const double score = static_cast<double>(u.servers[i].cfg.weight) / -std::log(unit);
    if (score > best_score) {
      best_score = score;
      best = i;
    }
  }
  return best;
}

std::optional<std::size_t> pick(const upstream_servers& u, pick_state& st, const pick_input& in) {
  const std::size_t n = u.servers.size();
  if (n == 0) return std::nullopt;
  if (n == 1) return in.tried.empty() ? std::optional<std::size_t>(0) : std::nullopt;
  if (st.current.size() != n) st.current.assign(n, 0);
  // Eligible: untried and in service; else untried at all.
  char stack[config::caps::servers];
  std::span<char> eligible(stack, n);
  bool any = false;
  for (std::size_t i = 0; i < n; ++i) {
    eligible[i] = !was_tried(in.tried, i) && u.servers[i].health->in_service(in.now);
    any = any || eligible[i];
  }
  if (!any)
    for (std::size_t i = 0; i < n; ++i) {
      eligible[i] = !was_tried(in.tried, i);
      any = any || eligible[i];
    }
  if (!any) return std::nullopt;
  switch (in.balance) {
    case config::balance::least_conn: return least_conn(u, st, eligible);
    case config::balance::hash:
      if (in.key_hash) return hash_pick(u, *in.key_hash, eligible);
      break;  // a request without the key is balanced round robin
    case config::balance::round_robin: break;
  }
  return smooth_round_robin(u, st, eligible);
}

bool ejecting_status(const upstream_servers& u, unsigned status) {
  const auto& s = u.eject.statuses;
  return std::find(s.begin(), s.end(), status) != s.end();
}

bool note_failure(const upstream_servers& u, std::size_t i, failure_kind why, unsigned status, steady::time_point now) {
  auto& h = *u.servers[i].health;
  h.failures.fetch_add(1, std::memory_order_relaxed);
  const auto in_row = h.failures_in_row.fetch_add(1, std::memory_order_relaxed) + 1;
  if (u.eject.failures == 0) return false;
  // Back from an ejection without a success since: one failure is enough again.
  const unsigned needed = h.ejections_in_row.load(std::memory_order_relaxed) > 0 ? 1 : u.eject.failures;
  if (in_row < needed) return false;
  steady::duration time{};
  {
    std::lock_guard lock(*u.ejecting);
    if (h.ejected(now)) return false;
    std::size_t out = 0;
    for (const auto& s : u.servers) out += s.health->ejected(now) ? 1 : 0;
    const auto allowed = static_cast<std::size_t>(u.eject.max_share * static_cast<double>(u.servers.size()) + 1e-9);
    if (out + 1 > allowed) {
      spdlog::debug("upstream {}: server {} failing ({} in a row) but not ejected: {} of {} are out (max_share {})",
                    u.name, u.servers[i].address, in_row, out, u.servers.size(), u.eject.max_share);
      return false;
    }
    // base_time doubled per ejection in a row, up to max_time (doubled in steps, so
    // that a long base never overflows).
    const auto k = h.ejections_in_row.fetch_add(1, std::memory_order_relaxed);
    time = u.eject.base_time;
    for (unsigned j = 0; j < k && time < u.eject.max_time; ++j) time *= 2;
    time = std::min<steady::duration>(time, u.eject.max_time);
    h.ejected_until.store((now + time).time_since_epoch().count(), std::memory_order_relaxed);
    h.failures_in_row.store(0, std::memory_order_relaxed);
    h.ejections.fetch_add(1, std::memory_order_relaxed);
    h.last_failure.store(why, std::memory_order_relaxed);
    h.last_status.store(status, std::memory_order_relaxed);
  }
  spdlog::warn("upstream {}: server {} ejected for {} ms after {} {} in a row{}", u.name, u.servers[i].address,
               std::chrono::duration_cast<std::chrono::milliseconds>(time).count(), in_row,
               in_row == 1 ? describe_one(why) : describe(why),
               why == failure_kind::status ? fmt::format(" (last {})", status) : std::string());
  return true;
}

bool note_success(const upstream_servers& u, std::size_t i, steady::time_point now) {
  auto& h = *u.servers[i].health;
  // (a request sent before the ejection and answered during it does not end it)
  if (h.ejected(now)) return false;
  if (h.failures_in_row.load(std::memory_order_relaxed) != 0) h.failures_in_row.store(0, std::memory_order_relaxed);
  if (h.ejections_in_row.load(std::memory_order_relaxed) == 0) return false;
  if (h.ejections_in_row.exchange(0, std::memory_order_relaxed) == 0) return false;
  spdlog::info("upstream {}: server {} back in service", u.name, u.servers[i].address);
  return true;
}

bool retry_allowed(const upstream_servers& u) {
  std::int64_t live = 0;
  for (const auto& s : u.servers) live += s.health->active.load(std::memory_order_relaxed);
  const auto cap = std::max<double>(u.budget.min, u.budget.share * static_cast<double>(live));
  return static_cast<double>(u.retrying->load(std::memory_order_relaxed)) < cap;
}

}  // namespace fg::upstream
