// The admin's /limits query (?route=&ip=&header.N=&query.N=&cookie.N=): a target as a
// client of the admin port sends it, parsed by Boost.URL, then by floodgate.
#include <boost/url/parse.hpp>

#include <cstdlib>
#include <string>

#include "admin/limits_query.hpp"
#include "config/loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view target(reinterpret_cast<const char*>(data), size);
  auto url = boost::urls::parse_origin_form(target);
  if (!url) return 0;
  fg::admin::limits_query q;
  auto refused = fg::admin::parse_limits_query(*url, q);
  if (refused && refused->status < 400) std::abort();
  if (refused) return 0;
  static const auto cfg = fg::config::load_string(
      "upstreams:\n  api:\n    address: \"127.0.0.1:9\"\nroutes:\n  - name: r\n    match: {path_prefix: /}\n"
      "    upstream: api\n    limits:\n      - {name: l, algorithm: fixed_window, limit: 5, window: 1s,\n"
      "         key: [ip, \"header:X-Key\", \"query:k\", \"cookie:sid\"]}\n",
      "fuzz.yaml").cfg;
  if (!cfg) std::abort();
  std::string client;
  if (q.ip)
    if (auto k = fg::admin::client_key(*q.ip, *cfg)) client = *k;
  fg::admin::synthetic_request req(q, client);
  for (const auto& route : cfg->routes)
    for (const auto& l : route.limits) (void)fg::limit::build_key("fuzz:", route.name, l, req.parts());
  return 0;
}
