// The YAML configuration loader, on any text: errors or a configuration, never a crash,
// a hang or an unbounded allocation (the caps in config/caps.hpp).
#include <cstdlib>
#include <string>

#include "config/loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = fg::config::load_string(text, "fuzz.yaml");
  if (r.ok() != r.errors.empty()) std::abort();
  if (r.errors.size() > 101) std::abort();
  return 0;
}
