#pragma once
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "config/yaml_reader.hpp"

// The loader's pieces shared by its files (config/loader.cpp, config/route_loader.cpp).
namespace fg::config::detail {

inline bool present(const YAML::Node& n) { return n && !n.IsNull(); }

template <class T, class U>
void set(T& dst, const std::optional<U>& v) {
  if (v) dst = static_cast<T>(*v);
}

// A duration above zero; else an error at `n`.
std::optional<duration> positive_duration(yaml_reader& r, const YAML::Node& n);

// A file's path, a relative one taken from the configuration file's folder (nullopt,
// with an error at `n`, if it is no string; "" if it is empty).
std::optional<std::string> file_path(yaml_reader& r, const YAML::Node& n);

// An IANA time zone name the system's tz database has (date::locate_zone).
bool valid_timezone(const std::string& name);

// A limit key or hash key: global, ip, header:<Name>, query:<name>, cookie:<name> or client_cert.
std::optional<key_source> key_source_of(yaml_reader& r, const YAML::Node& n);

// routes[].limits[].plans (config/plan_loader.cpp), read after the limit's own numbers.
void load_plans(yaml_reader& r, const YAML::Node& node, limit_config& l);

// upstreams: the mapping of name to upstream (config/upstream_loader.cpp).
void load_upstreams(yaml_reader& r, const YAML::Node& node, config& c);

// Walks the whole document, aliases expanded, and says where it passes caps::nodes or
// caps::depth (an alias bomb, a file of deeply nested lists): nothing else is looked
// at then.
std::optional<diagnostic> check_size(const YAML::Node& root, const std::string& file);

// routes: the list, its matches, responses and limits, checked against the upstreams
// already loaded into `c`.
class route_loader {
 public:
  explicit route_loader(yaml_reader& r) : r_(r) {}
  void routes(const YAML::Node& node, config& c);

 private:
  std::optional<std::string> shadowed_by_slash(const config& c, const route_match& m) const;
  void match(const YAML::Node& node, route_match& m);
  void response(const YAML::Node& node, response_config& rc);
  std::optional<key_source> key(const YAML::Node& n);
  void cost(const YAML::Node& n, limit_config& l, const std::optional<std::string>& algo);
  void calendar(yaml_reader::object& o, limit_config& l, const YAML::Node& window_n, bool month);
  void on_exceed(yaml_reader::object& o, limit_config& l, const std::optional<std::string>& algo);
  void limits(const YAML::Node& node, route_config& rc);
  void check_algorithm_keys(const YAML::Node& ln, const std::string& algo, limit_config& l, const YAML::Node& limit_n,
                            const YAML::Node& window_n, const YAML::Node& rate_n, const YAML::Node& burst_n);

  yaml_reader& r_;
  // Earlier routes' exact paths, and which routes have each (in file order).
  std::unordered_map<std::string, std::vector<std::size_t>> exact_paths_;
  std::size_t limit_count_ = 0;  // limits numbered so far (limit_config::index)
  duration drain_timeout_{0};    // http.drain_timeout (a delay must fit in a drain)
};

}  // namespace fg::config::detail
