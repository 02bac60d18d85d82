#pragma once
// Consumer files (routes[].limits[].plans.consumers): which plan each API key is on,
// the keys never in clear. One consumer a line, its key's SHA-256 in hex and its plan:
//
//   # sha256(key)                                                      plan
//   9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 gold
//
// (`printf %s "$KEY" | sha256sum` gives a key's digest). Up to 5,000,000 consumers in
// at most 512 MiB; kept as 16 bytes of digest and a plan number each, sorted: a lookup
// is one SHA-256 of the request's key and a binary search, no allocation.
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace fg::limit {

class consumer_map {
 public:
  static constexpr std::size_t max_consumers = 5'000'000;
  static constexpr std::uint64_t max_bytes = 512ull << 20;

  // Reads `path`; null with `error` ("path:line: what") when it cannot be used.
  static std::shared_ptr<const consumer_map> load(const std::string& path, std::string& error);

  // The plan of the consumer whose key is `key` (nullopt: not in the file).
  std::optional<std::string_view> plan_of(std::string_view key) const;
  std::size_t size() const { return entries_.size(); }
  // How long the file took to read and sort, in ms.
  std::int64_t load_ms() const { return load_ms_; }
  // The plan names the file uses, and the first line that uses each.
  const std::vector<std::pair<std::string, std::size_t>>& plans() const { return names_; }

 private:
  struct entry {
    std::array<unsigned char, 16> digest;
    std::uint16_t plan;
  };
  std::vector<entry> entries_;  // sorted by digest
  std::vector<std::pair<std::string, std::size_t>> names_;
  std::int64_t load_ms_ = 0;
};

// Every consumer file a configuration's limits name, read when the configuration is (at
// the start, by --check, at each reload: a file that cannot be used, or that names a
// plan its limit lacks, fails the load as a bad configuration does).
struct consumer_maps {
  std::map<std::string, std::shared_ptr<const consumer_map>, std::less<>> by_path;

  static std::optional<consumer_maps> read(const config::config& cfg, std::vector<std::string>& errors);
  const consumer_map* find(std::string_view path) const {
    auto it = by_path.find(path);
    return it == by_path.end() ? nullptr : it->second.get();
  }
};

// The consumer files a configuration names (to watch them).
std::vector<std::string> consumer_files(const config::config& cfg);

}  // namespace fg::limit
