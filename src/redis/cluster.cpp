#include "redis/cluster.hpp"

#include <boost/asio/post.hpp>
#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <string_view>

#include "redis/cluster_map.hpp"
#include "redis/topology.hpp"
#include "util/asio.hpp"

namespace fg::redis {

using error_code = boost::system::error_code;
using clock = std::chrono::steady_clock;

namespace {
constexpr auto tick_every = std::chrono::milliseconds(250);
constexpr auto refresh_every = std::chrono::seconds(5);
constexpr auto refresh_gap = std::chrono::milliseconds(100);
constexpr unsigned max_hops = 5, max_tries = 3;
// More nodes than any real cluster has (Redis' guidance is up to 1000): addresses come
// from the cluster's own answers, and a bound keeps a confused one from growing this.
constexpr std::size_t max_nodes = 2048;
// Calls waiting for a map after a redirection to an unknown address.
constexpr std::size_t max_parked = 4096;

std::string key_of(const config::endpoint& ep) { return ep.host + ":" + std::to_string(ep.port); }
}  // namespace

struct cluster_client::call {
  std::uint16_t slot;
  std::size_t argc;
  std::string args;
  raw_completion done;
  unsigned hops = 0, tries = 0;
  bool asked = false, parked = false;
};

cluster_client::cluster_client(asio::any_io_executor ex, config::redis_config cfg, std::string script)
    : ex_(ex), cfg_(std::move(cfg)), script_(std::move(script)), owner_(slot_count, no_owner), refresh_timer_(ex),
      tick_(ex) {}

cluster_client::~cluster_client() { stop(); }

void cluster_client::start() {
  start_seeds();
  arm_tick();
}

std::shared_ptr<connection> cluster_client::connect_to(const config::endpoint& ep) {
  auto c = std::make_shared<connection>(ex_, cfg_, script_, std::make_unique<standalone>(std::vector{ep}));
  c->start();
  return c;
}

void cluster_client::start_seeds() {
  for (const auto& a : cfg_.addresses) seeds_.push_back(connect_to(a));
}

bool cluster_client::known(const config::endpoint& ep) const {
  const auto key = key_of(ep);
  if (known_.count(key) || confirmed_.count(key)) return true;
  return std::any_of(cfg_.addresses.begin(), cfg_.addresses.end(),
                     [&](const config::endpoint& a) { return a.host == ep.host && a.port == ep.port; });
}

void cluster_client::park(std::shared_ptr<call> c) {
  if (c->parked || parked_.size() >= max_parked || stopped_) {
    c->done(errc::cluster, nullptr);
    return;
  }
  c->parked = true;
  parked_.push_back(std::move(c));
  want_nodes_ = true;
  refresh_soon();
}

void cluster_client::release_parked() {
  // Where the map (new, or as it was if none came) says now.
  auto calls = std::exchange(parked_, {});
  for (auto& c : calls) {
    const auto to = node_of(c->slot);  // before the move: arguments are evaluated in no set order
    dispatch(std::move(c), to, false);
  }
}

void cluster_client::drop(std::size_t i) {
  auto& n = nodes_[i];
  if (!n.live) return;
  if (n.conn) n.conn->stop();
  by_addr_.erase(key_of(n.address));
  n = node{};
  n.live = false;
  free_.push_back(i);
}

void cluster_client::stop() {
  if (stopped_) return;
  stopped_ = true;
  refresh_timer_.cancel();
  tick_.cancel();
  for (auto& n : nodes_)
    if (n.conn) n.conn->stop();
  for (auto& s : seeds_) s->stop();
  for (auto& c : std::exchange(parked_, {})) c->done(errc::disconnected, nullptr);
}

bool cluster_client::connected() const {
  if (masters_ == 0 || covered_ != slot_count) return false;
  for (const auto& n : nodes_)
    if (n.serving && !(n.conn && n.conn->connected())) return false;
  return true;
}

std::size_t cluster_client::masters_connected() const {
  std::size_t up = 0;
  for (const auto& n : nodes_) up += n.serving && n.conn && n.conn->connected();
  return up;
}

std::vector<std::pair<std::string, bool>> cluster_client::master_states() const {
  std::vector<std::pair<std::string, bool>> out;
  for (const auto& n : nodes_)
    if (n.serving) out.emplace_back(key_of(n.address), n.conn && n.conn->connected());
  return out;
}

std::size_t cluster_client::node_of(std::uint16_t slot) const {
  if (slot >= slot_count || owner_[slot] == no_owner) return npos;
  return owner_[slot];
}

std::size_t cluster_client::node_at(const config::endpoint& ep) {
  auto key = key_of(ep);
  auto it = by_addr_.find(key);
  std::size_t i;
  if (it != by_addr_.end()) {
    i = it->second;
  } else if (!free_.empty()) {
    i = free_.back();
    free_.pop_back();
    nodes_[i] = node{ep, nullptr};
    by_addr_.emplace(std::move(key), i);
  } else {
    if (nodes_.size() >= max_nodes) return npos;
    i = nodes_.size();
    nodes_.push_back({ep, nullptr});
    by_addr_.emplace(std::move(key), i);
  }
  if (!nodes_[i].conn && !stopped_) nodes_[i].conn = connect_to(ep);
  return i;
}

void cluster_client::eval(std::uint16_t slot, std::size_t argc, std::string args, raw_completion done) {
  auto c = std::make_shared<call>(call{slot, argc, std::move(args), std::move(done)});
  dispatch(std::move(c), node_of(slot), false);
}

void cluster_client::eval_at(std::size_t node, std::size_t argc, std::string args, raw_completion done) {
  if (node >= nodes_.size() || !nodes_[node].conn) {
    refresh_soon();
    asio::post(ex_, [done = std::move(done)] { done(errc::not_connected, nullptr); });
    return;
  }
  nodes_[node].conn->eval(argc, std::move(args), std::move(done));
}

void cluster_client::send(std::uint16_t slot, const std::vector<std::string>& args, completion done) {
  auto i = node_of(slot);
  if (i == npos || !nodes_[i].conn) {
    if (done) asio::post(ex_, [done = std::move(done)] { done(errc::not_connected, reply{}); });
    return;
  }
  nodes_[i].conn->send(args, std::move(done));
}

void cluster_client::dispatch(std::shared_ptr<call> c, std::size_t target, bool asking) {
  if (target == npos || !nodes_[target].conn) {
    // No master known for the slot (yet): a store error now, and a map soon.
    refresh_soon();
    auto done = std::move(c->done);
    asio::post(ex_, [done = std::move(done)] { done(errc::not_connected, nullptr); });
    return;
  }
  auto& conn = *nodes_[target].conn;
  if (!conn.connected() && c->hops > 0 && c->tries < max_tries) {
    // Redirected to a node whose connection is just being made (a master new to this
    // client): a moment for it, as for TRYAGAIN, before the call fails.
    auto timer = std::make_shared<asio::steady_timer>(ex_, std::chrono::milliseconds(10 << c->tries++));
    timer->async_wait([w = weak_from_this(), c, timer, target, asking](error_code) {
      if (auto self = w.lock()) self->dispatch(c, target < self->nodes_.size() ? target : npos, asking);
      else c->done(errc::disconnected, nullptr);
    });
    return;
  }
  // The arguments stay with the call for a redirection's retry.
  auto reply_to = [w = weak_from_this(), c, target](error_code ec, const redisReply* r) {
    if (auto self = w.lock()) self->on_reply(c, target, ec, r);
    else c->done(ec ? ec : error_code(errc::disconnected), nullptr);
  };
  if (asking) conn.eval_asking(c->argc, c->args, std::move(reply_to));
  else conn.eval(c->argc, c->args, std::move(reply_to));
}

void cluster_client::on_reply(std::shared_ptr<call> c, std::size_t from, error_code ec, const redisReply* r) {
  if (ec) {
    // A master lost or not reached: its slots may have moved (a failover).
    if (ec != errc::timeout) refresh_soon();
    c->done(ec, nullptr);
    return;
  }
  if (r && r->type == REDIS_REPLY_ERROR) {
    const std::string_view text(r->str, r->len);
    const auto kind = classify_error(text);
    if (kind == cluster_error::moved || kind == cluster_error::ask) {
      auto to = parse_redirect(text, nodes_[from].address);
      if (to && !known(to->address)) {
        // Not a node of the cluster as far as any map says: not followed (nor sent the
        // password); a new map decides.
        cluster_events::foreign_redirect.fetch_add(1, std::memory_order_relaxed);
        spdlog::warn("Redis Cluster: {} redirects slot {} to {}, which is not a node of the cluster's map: not followed",
                     key_of(nodes_[from].address), to->slot, key_of(to->address));
        park(std::move(c));
        return;
      }
      if (to && ++c->hops <= max_hops && !(kind == cluster_error::ask && c->asked)) {
        auto target = node_at(to->address);
        if (kind == cluster_error::moved) {
          cluster_events::moved.fetch_add(1, std::memory_order_relaxed);
          // Where the slot is now, at once; the rest of the map soon.
          if (target != npos && to->slot < slot_count) owner_[to->slot] = static_cast<std::uint16_t>(target);
          refresh_soon();
        } else {
          cluster_events::ask.fetch_add(1, std::memory_order_relaxed);
          c->asked = true;
        }
        const bool asking = kind == cluster_error::ask;
        // Not from inside this connection's reply callback.
        asio::post(ex_, [w = weak_from_this(), c, target, asking] {
          if (auto self = w.lock()) self->dispatch(c, target, asking);
          else c->done(errc::disconnected, nullptr);
        });
        return;
      }
      c->done(errc::cluster, nullptr);
      return;
    }
    if (kind == cluster_error::try_again) {
      // A slot's keys half moved (resharding): the move ends soon.
      cluster_events::try_again.fetch_add(1, std::memory_order_relaxed);
      if (c->tries < max_tries) {
        auto timer = std::make_shared<asio::steady_timer>(ex_, std::chrono::milliseconds(10 << c->tries++));
        timer->async_wait([w = weak_from_this(), c, timer](error_code) {
          if (auto self = w.lock()) self->dispatch(c, self->node_of(c->slot), false);
          else c->done(errc::disconnected, nullptr);
        });
        return;
      }
      c->done(errc::cluster, nullptr);
      return;
    }
    if (kind == cluster_error::cluster_down) {
      cluster_events::cluster_down.fetch_add(1, std::memory_order_relaxed);
      refresh_soon();
      c->done(errc::cluster, nullptr);
      return;
    }
  }
  c->done(ec, r);
}

void cluster_client::refresh_soon() {
  if (stopped_) return;
  if (refreshing_) {
    again_ = true;
    return;
  }
  const auto due = last_refresh_ + refresh_gap;
  if (clock::now() >= due) {
    refresh();
    return;
  }
  if (refresh_armed_) return;
  refresh_armed_ = true;
  refresh_timer_.expires_at(due);
  refresh_timer_.async_wait([w = weak_from_this()](error_code ec) {
    auto self = w.lock();
    if (!self || ec) return;
    self->refresh_armed_ = false;
    self->refresh();
  });
}

void cluster_client::refresh() {
  if (stopped_) return;
  if (refreshing_) {
    again_ = true;
    return;
  }
  // Asked in turn: the masters' connections that are up, else the seeds.
  std::vector<connection*> up;
  for (auto& n : nodes_)
    if (n.serving && n.conn && n.conn->connected()) up.push_back(n.conn.get());
  if (up.empty()) {
    if (seeds_.empty()) start_seeds();
    for (auto& s : seeds_)
      if (s->connected()) up.push_back(s.get());
  }
  if (up.empty()) {
    release_parked();
    return;  // the tick asks again
  }
  auto* asked = up[ask_next_++ % up.size()];
  refreshing_ = true;
  last_refresh_ = clock::now();
  asked->send({"CLUSTER", "SLOTS"}, [w = weak_from_this(), at = asked->endpoint()](error_code ec, reply r) {
    auto self = w.lock();
    if (!self || self->stopped_) return;
    self->refreshing_ = false;
    if (ec || r.is_error()) cluster_events::refresh_failed.fetch_add(1, std::memory_order_relaxed);
    else self->refreshed(r, at);
    // (calls parked since this refresh began wait for the next, which asks for nodes)
    if (!self->nodes_pending_ && !self->want_nodes_) self->release_parked();
    if (std::exchange(self->again_, false)) self->refresh_soon();
  });
  if (std::exchange(want_nodes_, false)) {
    // (after CLUSTER SLOTS on the same connection: its answer comes second)
    nodes_pending_ = true;
    asked->send({"CLUSTER", "NODES"}, [w = weak_from_this(), at = asked->endpoint()](error_code ec, reply r) {
      auto self = w.lock();
      if (!self || self->stopped_) return;
      self->nodes_pending_ = false;
      if (!ec && (r.type == reply::kind::string || r.type == reply::kind::status)) {
        self->confirmed_.clear();
        for (auto& ep : node_addresses(r.str, at, max_nodes)) self->confirmed_.insert(key_of(ep));
      }
      self->release_parked();
    });
  }
}

void cluster_client::refreshed(const reply& r, const config::endpoint& asked) {
  auto map = cluster_map::parse(r, asked);
  if (map && map->masters().size() > max_nodes) map = std::string("more masters than a cluster has");
  if (!map || map->covered() == 0) {
    cluster_events::refresh_failed.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("Redis Cluster: no usable slot map from {}: {}", key_of(asked),
                 map ? std::string("no slot is served") : map.error());
    return;
  }
  cluster_events::refreshes.fetch_add(1, std::memory_order_relaxed);
  known_.clear();
  for (const auto& range : map->ranges()) {
    known_.insert(key_of(range.master.address));
    for (const auto& replica : range.replicas) known_.insert(key_of(replica.address));
  }
  std::vector<bool> serving(nodes_.size() + map->masters().size(), false);
  std::fill(owner_.begin(), owner_.end(), no_owner);
  covered_ = 0;
  for (const auto& range : map->ranges()) {
    auto i = node_at(range.master.address);
    if (i == npos) continue;
    if (i >= serving.size()) serving.resize(i + 1, false);
    serving[i] = true;
    for (std::size_t s = range.first; s <= range.last; ++s) owner_[s] = static_cast<std::uint16_t>(i);
    covered_ += range.last - range.first + 1u;
  }
  std::size_t masters = 0;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    auto& n = nodes_[i];
    if (!n.live) continue;
    const bool now = i < serving.size() && serving[i];
    if (now != n.serving)
      spdlog::info("Redis Cluster: {} {}", key_of(n.address), now ? "serves slots" : "serves no slot any more");
    n.serving = now;
    masters += now;
    // A node that serves nothing (a failed master, a replica) is not kept: its entry
    // is free for another.
    if (!now) drop(i);
  }
  masters_ = masters;
  for (auto& s : seeds_) s->stop();
  seeds_.clear();
}

void cluster_client::arm_tick() {
  if (stopped_) return;
  // Often until the first map: the seeds are connecting.
  tick_.expires_after(masters_ == 0 ? std::chrono::milliseconds(50) : tick_every);
  tick_.async_wait([w = weak_from_this()](error_code ec) {
    auto self = w.lock();
    if (!self || ec) return;
    if (!self->connected() || clock::now() - self->last_refresh_ >= refresh_every) self->refresh();
    self->arm_tick();
  });
}

}  // namespace fg::redis
