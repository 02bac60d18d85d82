#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "routing/rules.hpp"

namespace fg::routing {

// Host (optional), method set, exact path or path prefix; first match in file order.
class route_table {
 public:
  // The next route (routes are matched in the order added): `host` empty for any host,
  // `methods` empty for any method; `path` exact, or a prefix when `prefix`.
  void add(std::string_view host, std::vector<std::string> methods, std::string_view path, bool prefix);

  // `host`: the Host header as sent (port and case are ignored); `path`: the
  // request path without the query, already normalized. Returns the index or -1.
  int match(std::string_view host, std::string_view method, std::string_view path) const;

 private:
  struct entry {
    std::string host;
    std::vector<std::string> methods;
    std::string path;
    bool prefix = false;
  };
  std::vector<entry> entries_;
};

}  // namespace fg::routing
