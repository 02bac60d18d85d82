#include "redis/sentinel.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>

#include "obs/logging.hpp"
#include "redis/connection.hpp"
#include "util/asio.hpp"

namespace fg::redis {


namespace {

constexpr auto poll_interval = std::chrono::milliseconds(500);

// `cfg` for talking to one sentinel: standalone, the sentinel's own credentials, no
// database, no script.
config::redis_config sentinel_config(const config::redis_config& cfg, const config::endpoint& at) {
  config::redis_config s;
  s.mode = config::redis_mode::standalone;
  s.addresses = {at};
  s.username = cfg.sentinel_username;
  s.password = cfg.sentinel_password;
  s.database = 0;
  s.timeout = std::max(cfg.timeout, std::chrono::milliseconds(200));
  s.ping_interval = cfg.ping_interval;
  // (never shorter than two of its own, longer, timeouts)
  if (cfg.stall_timeout.count() > 0) s.stall_timeout = std::max(cfg.stall_timeout, 2 * s.timeout);
  return s;
}

// A get-master-addr-by-name answer: [ip, port], or nil (no such master).
std::optional<config::endpoint> master_of(const reply& r) {
  if (r.type != reply::kind::array || r.elements.size() != 2) return std::nullopt;
  const auto& port = r.elements[1].str;
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) return std::nullopt;
  return config::endpoint{r.elements[0].str, static_cast<std::uint16_t>(value)};
}

}  // namespace

struct sentinel::state : std::enable_shared_from_this<state> {
  state(asio::any_io_executor e, std::string name, std::size_t q)
      : ex(std::move(e)), master_name(std::move(name)), quorum(q), timer(ex) {}

  asio::any_io_executor ex;
  std::string master_name;
  std::size_t quorum;  // 0: every sentinel that answers must agree
  std::vector<std::shared_ptr<connection>> sentinels, subscribers;
  std::optional<config::endpoint> master;
  std::function<void()> moved;
  asio::steady_timer timer;
  bool asking = false, again = false, stopped = false, disagreed = false;

  // The address enough sentinels name: with a quorum, the one at least `quorum` of them
  // name; without, the one every sentinel that answered names.
  std::optional<config::endpoint> agreed(const std::vector<std::pair<config::endpoint, std::size_t>>& named,
                                         std::size_t answered) const {
    for (const auto& [ep, votes] : named)
      if (quorum ? votes >= quorum : votes == answered) return ep;
    return std::nullopt;
  }

  // Asks every sentinel that is connected, takes the address they agree on; then again
  // every 500 ms.
  void ask() {
    if (stopped) return;
    if (asking) {
      again = true;
      return;
    }
    asking = true;
    asio::co_spawn(ex, ask_all(shared_from_this()), obs::logged_end{"sentinel: asking the sentinels ended"});
  }

  static asio::awaitable<void> ask_all(std::shared_ptr<state> self) {
    // (built before the co_await: GCC 12 cannot take a braced list in one)
    const std::vector<std::string> ask{"SENTINEL", "get-master-addr-by-name", self->master_name};
    // Each address named, with how many sentinels named it (at most one per sentinel).
    std::vector<std::pair<config::endpoint, std::size_t>> named;
    std::size_t answered = 0;
    for (auto& s : self->sentinels) {
      if (!s->connected()) continue;
      auto [ec, r] = co_await s->command(ask);
      if (self->stopped) co_return;
      if (ec || r.is_error()) continue;
      auto m = master_of(r);
      if (!m) continue;
      ++answered;
      auto it = std::find_if(named.begin(), named.end(), [&](const auto& n) { return n.first == *m; });
      if (it == named.end()) named.emplace_back(*m, 1);
      else ++it->second;
    }
    self->asking = false;
    auto found = answered ? self->agreed(named, answered) : std::nullopt;
    if (answered && !found) {
      // Sentinels mid-failover, or one that lies: the master stays what it was.
      if (!std::exchange(self->disagreed, true)) {
        std::string seen;
        for (const auto& [ep, votes] : named) seen += fmt::format("{}{} ({} of {})", seen.empty() ? "" : ", ", ep.str(), votes, answered);
        spdlog::warn("sentinel: no agreement on master '{}' ({}; {}): keeping {}", self->master_name, seen,
                     self->quorum ? fmt::format("quorum {}", self->quorum) : std::string("all must agree"),
                     self->master ? self->master->str() : std::string("none"));
      }
    } else if (found) {
      self->disagreed = false;
    }
    if (found && (!self->master || !(*found == *self->master))) {
      const bool had = self->master.has_value();
      spdlog::info("sentinel: master '{}' is {}{}", self->master_name, found->str(),
                   had ? fmt::format(" (was {})", self->master->str()) : std::string());
      self->master = found;
      if (had) sentinel_events::master_changes.fetch_add(1, std::memory_order_relaxed);
      if (had && self->moved) self->moved();
    }
    // Soon again when nothing answered yet (the sentinels' connections are coming up).
    self->timer.expires_after(found ? poll_interval : std::chrono::milliseconds(50));
    self->timer.async_wait([w = std::weak_ptr<state>(self)](boost::system::error_code ec) {
      if (auto s = w.lock(); s && !ec) s->ask();
    });
    if (std::exchange(self->again, false)) self->ask();
  }
};

sentinel::sentinel(asio::any_io_executor ex, const config::redis_config& cfg)
    : state_(std::make_shared<state>(ex, cfg.master_name, cfg.sentinel_quorum)) {
  for (const auto& at : cfg.addresses) {
    auto c = std::make_shared<connection>(ex, sentinel_config(cfg, at), std::string());
    c->start();
    state_->sentinels.push_back(std::move(c));
    // "+switch-master <name> <old ip> <old port> <new ip> <new port>": ask again now.
    auto sub = std::make_shared<connection>(ex, sentinel_config(cfg, at), std::string());
    sub->subscribe("+switch-master", [w = std::weak_ptr<state>(state_)](std::string_view msg) {
      auto s = w.lock();
      if (!s || !msg.starts_with(s->master_name) || msg.size() <= s->master_name.size() ||
          msg[s->master_name.size()] != ' ')
        return;
      sentinel_events::switch_master.fetch_add(1, std::memory_order_relaxed);
      // (not from inside the subscriber's callback)
      asio::post(s->ex, [s] { s->ask(); });
    });
    sub->start();
    state_->subscribers.push_back(std::move(sub));
  }
  state_->ask();
}

sentinel::~sentinel() { stop(); }

void sentinel::stop() {
  if (state_->stopped) return;
  state_->stopped = true;
  state_->timer.cancel();
  for (auto& s : state_->sentinels) s->stop();
  for (auto& s : state_->subscribers) s->stop();
}

std::vector<config::endpoint> sentinel::seeds() const {
  if (!state_->master) return {};
  return {*state_->master};
}

void sentinel::on_lost(const config::endpoint&) {
  // The master went away or is not one any more: ask now, not at the next poll. The
  // address stays the one to try until the sentinels name another (then the
  // connection is told to move, at once if it is waiting to try again).
  state_->ask();
}

void sentinel::watch(std::function<void()> moved) { state_->moved = std::move(moved); }

}  // namespace fg::redis
