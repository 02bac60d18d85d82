#include "store/script_call.hpp"

#include "limit/calendar.hpp"

#include <boost/endian/conversion.hpp>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>

#include "config/config.hpp"
#include "redis/resp.hpp"

namespace fg::store {

namespace {
// The script's algorithm numbers (lua/prelude.lua).
std::int64_t code(config::algorithm a) {
  switch (a) {
    case config::algorithm::fixed_window: return 1;
    case config::algorithm::sliding_log: return 2;
    case config::algorithm::sliding_window: return 3;
    case config::algorithm::token_bucket: return 4;
    case config::algorithm::gcra: return 5;
    case config::algorithm::concurrency: return 6;
  }
  return 1;
}

// The script's numbers, both ways, are little-endian 64-bit integers.
void append_int(std::string& out, std::int64_t v) {
  unsigned char b[8];
  boost::endian::endian_store<std::int64_t, 8, boost::endian::order::little>(b, v);
  out.append(reinterpret_cast<const char*>(b), 8);
}

void append_count(std::string& out, std::size_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  redis::append_bulk(out, std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
}

// A run: its length, then per limit allowed, remaining, reset, retry, d_remaining, d_reset.
constexpr std::size_t per_limit = 6;

}  // namespace

std::size_t script_call::spec_index(const check& c) {
  for (std::size_t i = 0; i < spec_ids_.size(); ++i)
    if (spec_ids_[i].first == c.cfg && spec_ids_[i].second == c.cost) return i + 1;
  spec_ids_.emplace_back(c.cfg, c.cost);
  const auto& l = *c.cfg;
  append_int(specs_, code(l.algo));
  if (config::rate_based(l)) {
    append_int(specs_, static_cast<std::int64_t>(l.rate_.count));
    append_int(specs_, static_cast<std::int64_t>(l.rate_.per.count()));
    append_int(specs_, static_cast<std::int64_t>(l.burst));
  } else if (l.calendar != config::limit_config::period::none) {
    // A calendar window: the ends of the period the gateway's clock is in and of the one
    // after; which one a new window takes, Redis' clock decides (lua/fixed_window.lua).
    const auto ends = limit::calendar_ends(l, limit::epoch_ms());
    append_int(specs_, static_cast<std::int64_t>(l.limit));
    append_int(specs_, ends.next);
    append_int(specs_, ends.current);
  } else {
    append_int(specs_, static_cast<std::int64_t>(l.limit));
    append_int(specs_, static_cast<std::int64_t>(l.window.count()));
    append_int(specs_, 0);
  }
  append_int(specs_, static_cast<std::int64_t>(c.cost));
  // (shadow 1/0 and on_exceed: delay's max_delay in one number: lua/evaluate.lua)
  append_int(specs_, (l.shadow ? 1 : 0) + 2 * static_cast<std::int64_t>(l.max_delay.count()));
  return spec_ids_.size();
}

std::size_t script_call::shape_index(std::span<const std::size_t> specs) {
  for (std::size_t i = 0; i < shape_ids_.size(); ++i)
    if (std::ranges::equal(shape_ids_[i], specs)) return i + 1;
  shape_ids_.emplace_back(specs.begin(), specs.end());
  shape_named_.push_back(
      std::ranges::any_of(specs, [&](std::size_t i) { return config::names_entries(*spec_ids_[i - 1].first); }));
  append_int(shapes_, static_cast<std::int64_t>(specs.size()));
  for (auto i : specs) append_int(shapes_, static_cast<std::int64_t>(i));
  return shape_ids_.size();
}

script_call::slot script_call::add(std::span<const check> checks, std::string_view nonce) {
  ++requests_;
  scratch_.clear();
  std::size_t hash = 0;
  for (const auto& c : checks) {
    scratch_.push_back(spec_index(c));
    hash = hash * 31 + std::hash<std::string_view>{}(c.key);
  }
  auto shape = shape_index(scratch_);
  if (shape_named_[shape - 1]) {
    entries_.push_back({shape, checks, nonce, hash});
    return {entries_.size() - 1, 0};
  }
  for (std::size_t e = 0; e < entries_.size(); ++e) {
    auto& en = entries_[e];
    if (en.hash != hash || en.shape != shape) continue;
    if (!std::ranges::equal(en.checks, checks, [](const check& x, const check& y) { return x.key == y.key; }))
      continue;
    return {e, en.count++};
  }
  entries_.push_back({shape, checks, {}, hash});
  return {entries_.size() - 1, 0};
}

std::pair<std::size_t, std::string> script_call::finish(mode m, bool keys_in_argv) {
  std::string keys, blob, nonces;
  std::size_t keys_count = 0, nonce_count = 0;
  blob.reserve(32 + specs_.size() + shapes_.size() + 16 * entries_.size());
  append_int(blob, static_cast<std::int64_t>(entries_.size()));
  append_int(blob, static_cast<std::int64_t>(spec_ids_.size()));
  append_int(blob, static_cast<std::int64_t>(shape_ids_.size()));
  std::size_t all_keys = 0;
  for (const auto& en : entries_) all_keys += en.checks.size();
  append_int(blob, static_cast<std::int64_t>(m) + (keys_in_argv ? 16 * static_cast<std::int64_t>(all_keys) : 0));
  blob += specs_;
  blob += shapes_;
  for (const auto& en : entries_) {
    for (const auto& c : en.checks) redis::append_bulk(keys, c.key);
    keys_count += en.checks.size();
    append_int(blob, static_cast<std::int64_t>(en.shape));
    append_int(blob, static_cast<std::int64_t>(en.count));
    if (shape_named_[en.shape - 1]) {
      redis::append_bulk(nonces, en.nonce);
      ++nonce_count;
    }
  }
  std::string out;
  out.reserve(keys.size() + blob.size() + nonces.size() + 32);
  append_count(out, keys_in_argv ? 0 : keys_count);
  if (!keys_in_argv) out += keys;
  redis::append_bulk(out, blob);
  out += nonces;
  if (keys_in_argv) out += keys;
  return {1 + keys_count + 1 + nonce_count, std::move(out)};
}

std::int64_t script_call::number(std::size_t i) const {
  return boost::endian::endian_load<std::int64_t, 8, boost::endian::order::little>(reply_ + i * 8);
}

bool script_call::read(const redisReply* r) {
  if (!r || r->type != REDIS_REPLY_STRING || r->len % 8 != 0) return false;
  reply_ = reinterpret_cast<const unsigned char*>(r->str);
  const std::size_t total = r->len / 8;
  std::size_t at = 0;
  for (auto& en : entries_) {
    en.runs = at;
    const std::size_t width = 1 + per_limit * en.checks.size();
    for (std::size_t covered = 0; covered < en.count; at += width) {
      if (at + width > total) return false;
      auto len = number(at);
      if (len < 1 || static_cast<std::size_t>(len) > en.count - covered) return false;
      covered += static_cast<std::size_t>(len);
    }
  }
  return at == total;
}

void script_call::decisions(slot s, std::span<const check> checks, std::span<decision> out) const {
  const auto& en = entries_[s.entry];
  const std::size_t width = 1 + per_limit * checks.size();
  // The run that holds this request, and its place in it (read() checked the runs).
  std::size_t at = en.runs, j = s.ordinal;
  for (auto len = static_cast<std::size_t>(number(at)); j >= len; len = static_cast<std::size_t>(number(at))) {
    j -= len;
    at += width;
  }
  const auto step = static_cast<std::int64_t>(j);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::size_t f = at + 1 + per_limit * i;
    out[i].allowed = number(f) == 1;
    out[i].limit = config::quota(*checks[i].cfg);
    out[i].remaining = static_cast<std::uint64_t>(std::max<std::int64_t>(0, number(f + 1) + step * number(f + 4)));
    out[i].reset_ms = number(f + 2) + step * number(f + 5);
    out[i].retry_ms = number(f + 3);
  }
}

std::string lease_member(std::string_view nonce, std::size_t index) {
  return std::string(nonce) + ":" + std::to_string(index + 1);
}

}  // namespace fg::store
