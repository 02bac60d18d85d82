#include "limit/keys.hpp"

#include "limit/consumers.hpp"

#include <boost/url/decode_view.hpp>
#include <boost/url/grammar/string_token.hpp>
#include <boost/url/pct_string_view.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>

#include "util/text.hpp"

namespace fg::limit {

namespace urls = boost::urls;

namespace {

// Bytes that are escaped in a key: controls, space, non-ASCII, and the key's own
// delimiters. A table: every byte of every identity passes here.
constexpr auto unsafe_bytes = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c)
    t[static_cast<std::size_t>(c)] = c <= 0x20 || c >= 0x7f || c == '{' || c == '}' || c == ':' || c == '|' || c == '%';
  return t;
}();

bool unsafe(unsigned char c) { return unsafe_bytes[c]; }

// Percent-decoding is Boost.URL's. With `plus`, '+' is a space too (query strings:
// application/x-www-form-urlencoded). False, and `out` untouched, when an escape is bad.
bool percent_decode(std::string_view raw, bool plus, std::string& out) {
  auto valid = urls::make_pct_string_view(raw);
  if (!valid) return false;
  urls::encoding_opts opt;
  opt.space_as_plus = plus;
  out.clear();
  valid->decode(opt, urls::string_token::assign_to(out));
  return true;
}

// Whether every '%' in `raw` starts a valid escape.
bool escapes_valid(std::string_view raw) { return urls::make_pct_string_view(raw).has_value(); }

// Whether the query parameter name `raw` decodes to `name`, without a copy.
bool name_is(std::string_view raw, std::string_view name) {
  auto valid = urls::make_pct_string_view(raw);
  if (!valid) return false;  // its pair is dropped anyway (see query_param)
  urls::encoding_opts opt;
  opt.space_as_plus = true;
  return urls::decode_view(*valid, opt) == name;
}

// 128 bits from FNV-1a and a second lane of it that also adds a constant each step:
// stable across builds and machines, so every gateway instance derives the same key.
std::string digest(std::string_view v) {
  const std::uint64_t a = util::fnv1a(v);
  std::uint64_t b = util::fnv1a_prime * 31;
  for (unsigned char c : v) b = (b ^ c) * util::fnv1a_prime + 0x9e3779b97f4a7c15ull;
  char buf[40];
  // '%' starts it: an encoded value always has "%25" there, so none can equal a digest.
  std::snprintf(buf, sizeof buf, "%%%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

}  // namespace

void append_encoded(std::string& out, std::string_view value) {
  static constexpr char hex[] = "0123456789ABCDEF";
  // Safe runs are appended whole: an IP or a token is usually one run.
  std::size_t i = 0;
  while (i < value.size()) {
    std::size_t j = i;
    while (j < value.size() && !unsafe(static_cast<unsigned char>(value[j]))) ++j;
    out.append(value.data() + i, j - i);
    if (j == value.size()) break;
    const auto c = static_cast<unsigned char>(value[j]);
    const char esc[3] = {'%', hex[c >> 4], hex[c & 0xf]};
    out.append(esc, 3);
    i = j + 1;
  }
}

std::optional<std::string_view> query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    auto amp = query.find('&');
    auto pair = query.substr(0, amp);
    auto eq = pair.find('=');
    // As servlet containers read them: names are matched decoded ("api%5Fkey=K" is
    // "api_key" upstream, so it must not be a missing key here), and a pair with a bad
    // escape is dropped (Tomcat drops it, so "api_key=%zz1&api_key=K" is K upstream and
    // must not be a fresh identity per spelling here).
    if (name_is(pair.substr(0, eq), name) && escapes_valid(pair))
      return eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

std::optional<std::string_view> cookie_value(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    auto semi = header.find(';');
    auto pair = util::trim(header.substr(0, semi));
    auto eq = pair.find('=');
    if (eq != std::string_view::npos && util::trim(pair.substr(0, eq)) == name) {
      auto v = util::trim(pair.substr(eq + 1));
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      return v;
    }
    if (semi == std::string_view::npos) break;
    header.remove_prefix(semi + 1);
  }
  return std::nullopt;
}

std::optional<std::string_view> source_value(const config::key_source& src, const request_parts& r, std::string& decoded) {
  using kind = config::key_source::kind;
  std::optional<std::string_view> v;
  switch (src.type) {
    case kind::global: v = "*"; break;
    case kind::ip: v = r.client; break;
    case kind::client_cert: v = r.client_cert; break;
    case kind::header: v = r.header ? r.header(r.header_ctx, src.name) : std::nullopt; break;
    case kind::query:
      // Decoded, so "abc" and "%61bc" are one identity (as they are to the upstream).
      if (auto raw = query_param(r.query, src.name)) {
        if (percent_decode(*raw, true, decoded)) v = decoded;  // valid: query_param checked
      }
      break;
    case kind::cookie: {
      // Percent-decoded too ('+' stays): Spring's @CookieValue reads "%4B" as "K".
      auto c = r.header ? r.header(r.header_ctx, "Cookie") : std::nullopt;
      if (c) {
        if (auto raw = cookie_value(*c, src.name)) {
          // A value with a bad escape is taken as it is.
          v = raw->find('%') != std::string_view::npos && percent_decode(*raw, false, decoded)
                  ? std::string_view(decoded)
                  : *raw;
        }
      }
      break;
    }
  }
  if (v && v->empty() && src.type != kind::global) v.reset();
  return v;
}

bool build_key(std::string& out, std::string_view prefix, std::string_view route, const config::limit_config& l,
               const request_parts& r, bool cluster) {
  using kind = config::key_source::kind;
  // The head, "<prefix>{<route>:<limit>:" (cluster: "<prefix>{<route>:"), in one write.
  const std::string_view name = cluster ? std::string_view() : std::string_view(l.name);
  out.resize(prefix.size() + route.size() + name.size() + (cluster ? 2 : 3));
  char* p = out.data();
  for (std::string_view piece : {prefix, std::string_view("{"), route, std::string_view(":"), name,
                                 cluster ? std::string_view() : std::string_view(":")})
    p = util::put(p, piece);
  const std::size_t at = out.size();
  std::string decoded;
  bool first = true;
  for (const auto& src : l.key) {
    auto v = source_value(src, r, decoded);
    if (!first) out += '|';
    first = false;
    if (!v) {
      if (l.missing_key == config::on_missing_key::skip) return false;
      out += "%anon";
      continue;
    }
    if (src.type == kind::global) out += '*';
    else append_encoded(out, *v);
  }
  if (out.size() - at > 200) out.replace(at, std::string::npos, digest(std::string_view(out).substr(at)));
  out += '}';
  if (cluster) {
    out += ':';
    out += l.name;
  }
  return true;
}

std::optional<std::string> build_key(std::string_view prefix, std::string_view route, const config::limit_config& l,
                                     const request_parts& r, bool cluster) {
  std::string key;
  if (!build_key(key, prefix, route, l, r, cluster)) return std::nullopt;
  return key;
}

plan_pick pick_plan(const config::limit_config& l, const request_parts& r, const consumer_maps* consumers,
                    std::string& scratch) {
  using by = config::plan_choice::by;
  const auto& ch = l.choice;
  std::optional<std::string_view> name;
  const auto key = source_value(ch.how == by::source ? ch.from : ch.consumer_key, r, scratch);
  if (key && ch.how == by::source) {
    name = key;
  } else if (key && consumers) {
    if (const auto* map = consumers->find(ch.consumers)) name = map->plan_of(*key);
  }
  const config::limit_config* plan = nullptr;
  if (name)
    for (const auto& p : l.plans)
      if (p.plan == *name) plan = &p;
  const bool known = plan != nullptr;
  if (!known && ch.reject_unknown) return {nullptr, key ? 403u : 401u};
  if (!known) plan = &l.plans[ch.default_plan];
  return {plan, 0};
}

std::optional<std::uint64_t> request_cost(const config::limit_config& l, const request_parts& r) {
  using kind = config::limit_config::cost_kind;
  if (l.cost_from == kind::body_bytes) return r.chunked ? 1 : r.body_length;
  if (l.cost_from == kind::fixed || !r.header) return l.cost;
  const auto v = r.header(r.header_ctx, l.cost_header);
  if (!v) return l.cost;
  std::uint64_t n = 0;
  const auto* end = v->data() + v->size();
  auto [p, ec] = std::from_chars(v->data(), end, n);
  if (v->empty() || ec != std::errc{} || p != end || n > 1'000'000'000) return std::nullopt;
  return n;
}

bool checks_follow_client(const config::route_config& route) {
  using kind = config::key_source::kind;
  return std::all_of(route.limits.begin(), route.limits.end(), [](const config::limit_config& l) {
    return l.choice.how == config::plan_choice::by::none && l.cost_from == config::limit_config::cost_kind::fixed &&
           std::all_of(l.key.begin(), l.key.end(),
                       [](const config::key_source& k) { return k.type == kind::ip || k.type == kind::global; });
  });
}

unsigned build_checks(std::vector<check>& checks, std::string_view prefix, const config::route_config& route,
                      const request_parts& r, bool cluster, const consumer_maps* consumers) {
  std::size_t n = 0;
  std::string scratch;
  unsigned refusal = 0;
  for (const auto& l : route.limits) {
    const config::limit_config* cfg = &l;
    if (l.choice.how != config::plan_choice::by::none) {
      const auto pick = pick_plan(l, r, consumers, scratch);
      if (pick.refuse) {
        if (!refusal) refusal = pick.refuse;
        continue;
      }
      if (pick.plan->unlimited) continue;
      cfg = pick.plan;
    }
    auto cost = request_cost(l, r);
    if (!cost) {
      if (!refusal) refusal = 400;
      continue;
    }
    // Nothing to take (an empty upload, a free call): no check; but a limit charged
    // after the response takes at least 1 up front, so that a client in debt is refused
    // and the request is charged.
    if (*cost == 0 && l.charge_header.empty()) continue;
    if (*cost == 0) *cost = 1;
    if (n == checks.size()) checks.emplace_back();
    auto& c = checks[n];
    if (!build_key(c.key, prefix, route.name, l, r, cluster)) continue;
    c.cfg = cfg;
    c.cost = *cost;
    ++n;
  }
  checks.resize(n);
  // A refused request counts only under keys that are not its own say (the address, a
  // verified certificate, global): a key read from a header, the refused credential
  // among them, would make a store key per guess.
  if (refusal)
    std::erase_if(checks, [](const check& c) {
      return !std::all_of(c.cfg->key.begin(), c.cfg->key.end(), [](const config::key_source& k) {
        using kind = config::key_source::kind;
        return k.type == kind::ip || k.type == kind::global || k.type == kind::client_cert;
      });
    });
  return refusal;
}

}  // namespace fg::limit
