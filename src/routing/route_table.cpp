#include "routing/route_table.hpp"

#include <algorithm>
#include <array>

namespace fg::routing {

void route_table::add(std::string_view host, std::vector<std::string> methods, std::string_view path, bool prefix) {
  entries_.push_back({normalize_host(host), std::move(methods), std::string(path), prefix});
}

int route_table::match(std::string_view host, std::string_view method, std::string_view path) const {
  std::string h;
  bool host_done = false;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const auto& e = entries_[i];
    if (!e.host.empty()) {
      if (!host_done) h = normalize_host(host), host_done = true;
      if (h != e.host) continue;
    }
    if (!methods_take(e.methods, method)) continue;
    if (e.prefix ? !path.starts_with(e.path) : !exact_path_takes(e.path, path)) continue;
    return static_cast<int>(i);
  }
  return -1;
}

}  // namespace fg::routing
