#include "routing/rules.hpp"

#include <boost/url/parse.hpp>
#include <boost/url/url.hpp>

#include <algorithm>
#include <array>

namespace fg::routing {

std::string normalize_host(std::string_view host) {
  std::string out;
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    host = host.substr(0, close == std::string_view::npos ? host.size() : close + 1);
  } else if (auto colon = host.rfind(':'); colon != std::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  out.reserve(host.size());
  for (char c : host) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool methods_take(const std::vector<std::string>& methods, std::string_view method) {
  auto has = [&](std::string_view m) { return std::find(methods.begin(), methods.end(), m) != methods.end(); };
  return methods.empty() || has(method) || (method == "HEAD" && has("GET"));
}

bool exact_path_takes(std::string_view route_path, std::string_view path) {
  if (path.size() == route_path.size() + 1 && path.back() == '/' && !route_path.ends_with('/')) path.remove_suffix(1);
  return path == route_path;
}

namespace {

// What one pass over an origin-form target found in its path (before any '?').
enum class path_scan { plain, needs_normalizing, bad };

// The classes of a path's bytes: most are plain and cost the scan one table load.
enum : unsigned char { c_plain, c_bad, c_slash, c_special, c_query, c_fragment };
constexpr auto byte_classes = [] {
  std::array<unsigned char, 256> t{};
  for (int c = 0; c < 256; ++c)
    t[static_cast<std::size_t>(c)] = c <= 0x20 || c >= 0x7f || c == '\\' ? c_bad : c_plain;
  t['/'] = c_slash;
  t['%'] = t[';'] = c_special;
  t['?'] = c_query;
  t['#'] = c_fragment;
  return t;
}();

// One pass: a path with no control, space, non-ASCII or '\\' byte, no '#' anywhere in the
// target, and no escape, ';', "//" or dot segment ("/./", "/../", or at the end) is
// plain: routes match it as it is. `path` is set to the part before '?'.
path_scan scan_origin_form(std::string_view target, std::string_view& path) {
  const auto* p = reinterpret_cast<const unsigned char*>(target.data());
  const std::size_t n = target.size();
  auto result = path_scan::plain;
  std::size_t i = 0;
  for (; i < n; ++i) {
    switch (byte_classes[p[i]]) {
      case c_plain: continue;
      case c_slash: {
        // A segment ends at a '/' or where the path does (at '?' or the target's end).
        auto ends = [&](std::size_t k) { return k == n || p[k] == '/' || p[k] == '?'; };
        if (i + 1 < n && (p[i + 1] == '/' || (p[i + 1] == '.' && (ends(i + 2) || (p[i + 2] == '.' && ends(i + 3))))))
          result = path_scan::needs_normalizing;
        continue;
      }
      case c_special: result = path_scan::needs_normalizing; continue;
      case c_bad:
      case c_fragment: return path_scan::bad;
      case c_query: break;
    }
    break;
  }
  path = target.substr(0, i);
  // A fragment is no part of a request target (RFC 9112 §3.2) and Beast lets "#" through:
  // cutting it off would match "/public#/../admin" as "/public" while upstream may see "/admin".
  if (i < n && target.find('#', i) != std::string_view::npos) return path_scan::bad;
  return result;
}

void merge_slashes(std::string& p) {
  std::string merged;
  merged.reserve(p.size());
  for (char c : p)
    if (!(c == '/' && !merged.empty() && merged.back() == '/')) merged += c;
  p.swap(merged);
}

// Before dot segments are removed: drop each segment's path parameters (";" up to the
// next "/"), decode "%2E"/"%2F" (normalize_path decodes them anyway) and merge repeated
// slashes.
// - Path parameters go first, on the raw path, as servlet containers (Tomcat, Jetty:
//   the Spring services behind us) do: they serve "/api/login;x=1" as "/api/login" and
//   "/public/..;/admin" as "/admin", so those must match the routes (and limits) of
//   "/api/login" and "/admin", not a catch-all or "/public". "%3B" is no separator
//   there, nor here.
// - "/x//../admin" and "/x/%2F../admin" both give "/admin", as in servers that merge
//   slashes (nginx, Apache, Go's path.Clean), not "/x/admin".
std::string prepare_path(std::string_view p) {
  std::string out;
  out.reserve(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == ';') {
      auto slash = p.find('/', i);
      if (slash == std::string_view::npos) break;
      i = slash - 1;
      continue;
    }
    if (p[i] == '%' && i + 2 < p.size() && p[i + 1] == '2') {
      char c = static_cast<char>(std::toupper(static_cast<unsigned char>(p[i + 2])));
      if (c == 'E' || c == 'F') {
        out += c == 'E' ? '.' : '/';
        i += 2;
        continue;
      }
    }
    out += p[i];
  }
  merge_slashes(out);
  if (out.empty() || out.front() != '/') out.insert(out.begin(), '/');
  return out;
}

}  // namespace

bool normalize_target_path(std::string_view target, std::string& out) {
  if (target.empty()) return false;
  std::string prepared;
  if (target.front() == '/') {
    std::string_view path;
    auto scan = scan_origin_form(target, path);
    if (scan == path_scan::bad) return false;
    if (scan == path_scan::plain) {
      out.assign(path);
      return true;
    }
    if (!boost::urls::parse_origin_form(target)) return false;
    prepared = prepare_path(path);
  } else {
    auto r = boost::urls::parse_absolute_uri(target);
    if (!r || (r->scheme() != "http" && r->scheme() != "https")) return false;
    prepared = prepare_path(r->encoded_path());
  }
  auto r = boost::urls::parse_origin_form(prepared);
  if (!r) return false;
  boost::urls::url u(*r);
  u.normalize_path();
  out.assign(u.encoded_path().data(), u.encoded_path().size());
  // Merge repeated slashes: "//admin" must not slip past a "/admin" limit.
  merge_slashes(out);
  // Boost.URL keeps ".." segments that climb above the root ("/../admin" stays as is,
  // RFC 3986 errata 4547); for an absolute path RFC 3986 §5.2.4 drops them.
  while (out.starts_with("/..") && (out.size() == 3 || out[3] == '/')) out.erase(0, 3);
  if (out.empty() || out.front() != '/') out.insert(out.begin(), '/');
  return true;
}

}  // namespace fg::routing
