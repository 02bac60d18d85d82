#pragma once
// Splitting one fuzz input into the pieces a target needs, deterministically.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fg::fuzz {

class input {
 public:
  input(const std::uint8_t* data, std::size_t size) : rest_(reinterpret_cast<const char*>(data), size) {}
  // One byte (0 when none is left).
  std::uint8_t byte() {
    if (rest_.empty()) return 0;
    auto b = static_cast<std::uint8_t>(rest_.front());
    rest_.remove_prefix(1);
    return b;
  }
  // Up to the next '\n' (not included), or all that is left.
  std::string_view line() {
    auto nl = rest_.find('\n');
    auto out = rest_.substr(0, nl);
    rest_.remove_prefix(nl == std::string_view::npos ? rest_.size() : nl + 1);
    return out;
  }
  std::string_view rest() const { return rest_; }
  bool empty() const { return rest_.empty(); }

 private:
  std::string_view rest_;
};

}  // namespace fg::fuzz
