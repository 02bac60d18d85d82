#include "limit/consumers.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstring>

#include "config/source_file.hpp"

namespace fg::limit {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool blank(char c) { return c == ' ' || c == '\t'; }

// SHA-256 of `data`, its first 16 bytes. The digest is fetched once and a context kept
// per thread: no implicit fetch (a lock) or allocation per request.
std::array<unsigned char, 16> digest16(std::string_view data) {
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  thread_local std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  unsigned char full[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  std::array<unsigned char, 16> out{};
  if (md && ctx && EVP_DigestInit_ex2(ctx.get(), md, nullptr) == 1 &&
      EVP_DigestUpdate(ctx.get(), data.data(), data.size()) == 1 && EVP_DigestFinal_ex(ctx.get(), full, &n) == 1)
    std::memcpy(out.data(), full, out.size());
  return out;
}

bool before(const std::array<unsigned char, 16>& a, const std::array<unsigned char, 16>& b) {
  return std::memcmp(a.data(), b.data(), a.size()) < 0;
}

}  // namespace

std::shared_ptr<const consumer_map> consumer_map::load(const std::string& path, std::string& error) {
  const auto started = std::chrono::steady_clock::now();
  std::string text;
  if (auto d = config::read_bounded_file(path, text, max_bytes, "a consumer file")) {
    error = d->str();
    return nullptr;
  }
  auto out = std::make_shared<consumer_map>();
  auto fail = [&](std::size_t line, const std::string& what) {
    error = path + (line ? ":" + std::to_string(line) : std::string()) + ": " + what;
    return nullptr;
  };
  std::size_t line = 0;
  for (std::size_t at = 0; at < text.size();) {
    auto end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string_view l(text.data() + at, end - at);
    at = end + 1;
    ++line;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    while (!l.empty() && blank(l.front())) l.remove_prefix(1);
    if (l.empty() || l.front() == '#') continue;
    entry e{};
    if (l.size() < 64) return fail(line, "want a key's SHA-256 (64 hex digits) and a plan");
    for (std::size_t i = 0; i < 64; ++i) {
      const int v = hex_value(l[i]);
      if (v < 0) return fail(line, "want a key's SHA-256 (64 hex digits) and a plan");
      if (i < 32) e.digest[i / 2] = static_cast<unsigned char>(e.digest[i / 2] << 4 | v);
    }
    l.remove_prefix(64);
    if (l.empty() || !blank(l.front())) return fail(line, "want a key's SHA-256 (64 hex digits) and a plan");
    while (!l.empty() && blank(l.front())) l.remove_prefix(1);
    while (!l.empty() && blank(l.back())) l.remove_suffix(1);
    if (l.empty() || l.size() > 64 || !std::all_of(l.begin(), l.end(), [](unsigned char c) {
          return std::isalnum(c) || c == '-' || c == '_' || c == '.';
        }))
      return fail(line, "want a plan name after the digest (letters, digits, - _ .)");
    auto it = std::find_if(out->names_.begin(), out->names_.end(), [&](auto& n) { return n.first == l; });
    if (it == out->names_.end()) {
      if (out->names_.size() == 1024) return fail(line, "more than 1024 plan names in one file");
      out->names_.emplace_back(std::string(l), line);
      it = out->names_.end() - 1;
    }
    e.plan = static_cast<std::uint16_t>(it - out->names_.begin());
    if (out->entries_.size() == max_consumers)
      return fail(line, "more than " + std::to_string(max_consumers) + " consumers in one file");
    out->entries_.push_back(e);
  }
  std::sort(out->entries_.begin(), out->entries_.end(), [](const entry& a, const entry& b) { return before(a.digest, b.digest); });
  // The same key twice would be two plans for one consumer.
  for (std::size_t i = 1; i < out->entries_.size(); ++i)
    if (out->entries_[i - 1].digest == out->entries_[i].digest)
      return fail(0, "a key is listed twice (its digest's first 16 bytes are the same twice)");
  out->entries_.shrink_to_fit();
  out->load_ms_ =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
  return out;
}

std::optional<std::string_view> consumer_map::plan_of(std::string_view key) const {
  const auto d = digest16(key);
  auto it = std::lower_bound(entries_.begin(), entries_.end(), d,
                             [](const entry& e, const std::array<unsigned char, 16>& k) { return before(e.digest, k); });
  if (it == entries_.end() || it->digest != d) return std::nullopt;
  return names_[it->plan].first;
}

std::vector<std::string> consumer_files(const config::config& cfg) {
  std::vector<std::string> out;
  for (const auto& r : cfg.routes)
    for (const auto& l : r.limits)
      if (l.choice.how == config::plan_choice::by::consumers &&
          std::find(out.begin(), out.end(), l.choice.consumers) == out.end())
        out.push_back(l.choice.consumers);
  return out;
}

std::optional<consumer_maps> consumer_maps::read(const config::config& cfg, std::vector<std::string>& errors) {
  consumer_maps out;
  const auto before_errors = errors.size();
  for (const auto& path : consumer_files(cfg)) {
    std::string error;
    auto map = consumer_map::load(path, error);
    if (!map) {
      errors.push_back(error);
      continue;
    }
    out.by_path.emplace(path, std::move(map));
  }
  // Every plan a file names is a plan of each limit that reads the file.
  for (const auto& r : cfg.routes)
    for (const auto& l : r.limits) {
      if (l.choice.how != config::plan_choice::by::consumers) continue;
      const auto* map = out.find(l.choice.consumers);
      if (!map) continue;
      for (const auto& [name, line] : map->plans())
        if (std::none_of(l.plans.begin(), l.plans.end(), [&](const auto& p) { return p.plan == name; }))
          errors.push_back(l.choice.consumers + ":" + std::to_string(line) + ": plan '" + name +
                           "' is not a plan of limit " + l.name + " (route " + r.name + ")");
    }
  if (errors.size() != before_errors) return std::nullopt;
  return out;
}

}  // namespace fg::limit
