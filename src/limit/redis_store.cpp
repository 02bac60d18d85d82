#include "limit/redis_store.hpp"

#include "redis/reply.hpp"

namespace fg::limit {

namespace {
const char* code(config::algorithm a) {
  switch (a) {
    case config::algorithm::fixed_window: return "fw";
    case config::algorithm::sliding_log: return "sl";
    case config::algorithm::sliding_window: return "sw";
    case config::algorithm::token_bucket: return "tb";
    case config::algorithm::gcra: return "gcra";
    case config::algorithm::concurrency: return "cc";
  }
  return "fw";
}
}  // namespace

void script_call(std::span<const check> checks, std::string_view nonce, std::vector<std::string>& keys,
                 std::vector<std::string>& args) {
  keys.clear();
  args.clear();
  args.emplace_back(nonce);
  for (const auto& c : checks) {
    const auto& l = *c.cfg;
    keys.push_back(c.key);
    args.emplace_back(code(l.algo));
    bool rate_based = l.algo == config::algorithm::token_bucket || l.algo == config::algorithm::gcra;
    if (rate_based) {
      args.push_back(std::to_string(l.rate_.count));
      args.push_back(std::to_string(l.rate_.per.count()));
      args.push_back(std::to_string(l.burst));
    } else {
      args.push_back(std::to_string(l.limit));
      args.push_back(std::to_string(l.window.count()));
      args.emplace_back("0");
    }
    args.push_back(std::to_string(c.cost));
    args.emplace_back(l.shadow ? "1" : "0");
  }
}

bool decode_reply(const redis::reply& r, std::span<decision> out) {
  if (r.type != redis::reply::kind::array || r.elements.size() != out.size() * 5) return false;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto* e = &r.elements[i * 5];
    for (int j = 0; j < 5; ++j)
      if (e[j].type != redis::reply::kind::integer) return false;
    out[i].allowed = e[0].integer == 1;
    out[i].limit = static_cast<std::uint64_t>(std::max<std::int64_t>(0, e[1].integer));
    out[i].remaining = static_cast<std::uint64_t>(std::max<std::int64_t>(0, e[2].integer));
    out[i].reset_ms = e[3].integer;
    out[i].retry_ms = e[4].integer;
  }
  return true;
}

std::string lease_member(std::string_view nonce, std::size_t index) {
  return std::string(nonce) + ":" + std::to_string(index + 1);
}

std::int64_t deny_cache::denied_until(const std::string& key, std::int64_t now) {
  auto it = map_.find(key);
  if (it == map_.end()) return 0;
  if (it->second <= now) {
    map_.erase(it);
    return 0;
  }
  return it->second;
}

void deny_cache::remember(const std::string& key, std::int64_t until) {
  if (map_.size() >= max_) map_.clear();
  map_[key] = until;
}

}  // namespace fg::limit
