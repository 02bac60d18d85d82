#include "upstream/choice.hpp"

#include "upstream/pool.hpp"

#include <spdlog/spdlog.h>

#include "obs/logging.hpp"

namespace fg::upstream {

void choice::begin(pool& p, const config::upstream_config& cfg, const upstream_servers& servers,
                   std::optional<std::uint64_t> key_hash, steady::time_point now) {
  end();
  pool_ = &p;
  cfg_ = &cfg;
  servers_ = &servers;
  key_hash_ = key_hash;
  retries_left_ = cfg.retries;
  tried_count_ = 0;
  counted_ = false;
  auto i = p.pick(cfg, servers, {cfg.balance, key_hash, {}, now});
  hold(i.value_or(0));
}

const std::string& choice::address() const {
  static const std::string none_yet = "no server: its names have not resolved";
  return none() ? none_yet : servers_->servers[server_].address;
}

void choice::hold(std::size_t i) {
  server_ = i;
  if (none()) return;
  auto& h = *servers_->servers[i].health;
  h.active.fetch_add(1, std::memory_order_relaxed);
  h.requests.fetch_add(1, std::memory_order_relaxed);
  holding_ = true;
}

void choice::end() {
  if (holding_) servers_->servers[server_].health->active.fetch_sub(1, std::memory_order_relaxed);
  if (retrying_) servers_->retrying->fetch_sub(1, std::memory_order_relaxed);
  holding_ = retrying_ = false;
}

void choice::failed(failure_kind why, steady::time_point now) {
  // One failure a request at most: a request that makes servers fail (one that an
  // upstream resets on) counts once, however many it is retried on.
  if (counted_ || none()) return;
  counted_ = true;
  note_failure(*servers_, server_, why, 0, now);
}

void choice::answered(unsigned status, steady::time_point now) {
  // The retry is over: its place in the budget is not held for the response's life.
  if (retrying_) servers_->retrying->fetch_sub(1, std::memory_order_relaxed);
  retrying_ = false;
  if (none() || status == 0) return;
  if (ejecting_status(*servers_, status)) {
    if (!counted_) note_failure(*servers_, server_, failure_kind::status, status, now);
  } else {
    note_success(*servers_, server_, now);
  }
}

bool choice::retry(steady::time_point now) {
  if (retries_left_ == 0 || tried_count_ >= tried_.size() || servers_->servers.size() < 2) return false;
  if (!retrying_ && !retry_allowed(*servers_)) {
    // (logged at most every 5 s, with the count since, for all upstreams of the process)
    static obs::periodic_count refused;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
    if (const auto n = refused.add(ms))
      spdlog::warn("upstream {}: {} retr{} refused by retry_budget (retries in flight past its share of the requests in flight) so far",
                   cfg_->name, n, n == 1 ? "y" : "ies");
    return false;
  }
  tried_[tried_count_++] = server_;
  auto next = pool_->pick(*cfg_, *servers_, {cfg_->balance, key_hash_, {tried_.data(), tried_count_}, now});
  if (!next) return false;
  --retries_left_;
  servers_->servers[server_].health->active.fetch_sub(1, std::memory_order_relaxed);
  holding_ = false;
  if (!retrying_) servers_->retrying->fetch_add(1, std::memory_order_relaxed);
  retrying_ = true;
  hold(*next);
  servers_->servers[server_].health->retries.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace fg::upstream
