#include "routing/route_table.hpp"

#include <algorithm>
#include <array>

namespace fg::routing {

using match::exact_path_takes;
using match::methods_take;
using match::normalize_host;

route_table::route_table(const std::vector<config::route_config>& routes) {
  for (const auto& r : routes) {
    entry e;
    e.host = normalize_host(r.match.host);
    e.methods = r.match.methods;
    e.prefix = r.match.path.empty();
    e.path = e.prefix ? r.match.path_prefix : r.match.path;
    entries_.push_back(std::move(e));
  }
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
