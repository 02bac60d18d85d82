#include "config/yaml_reader.hpp"

#include <algorithm>
#include <cstdlib>
#include <unordered_map>

#include "config/caps.hpp"
#include "config/loader_parts.hpp"

namespace fg::config {

std::string diagnostic::str() const {
  if (line <= 0) return file + ": " + message;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

namespace {

// Case-insensitive edit distance where swapping two adjacent letters counts as one edit
// (optimal string alignment), so "levle" is one edit from "level".
std::size_t edit_distance(std::string_view a, std::string_view b) {
  auto eq = [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  };
  std::vector<std::size_t> prev2(b.size() + 1), prev(b.size() + 1), row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      row[j] = std::min({prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (eq(a[i - 1], b[j - 1]) ? 0 : 1)});
      if (i > 1 && j > 1 && eq(a[i - 1], b[j - 2]) && eq(a[i - 2], b[j - 1]))
        row[j] = std::min(row[j], prev2[j - 2] + 1);
    }
    std::swap(prev2, prev);
    std::swap(prev, row);
  }
  return prev[b.size()];
}

}  // namespace

std::optional<std::string> did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  // One edit per three letters (at least one): "foo" is not a typo of "log".
  std::size_t best_d = std::max<std::size_t>(1, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    auto d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

std::optional<std::string> expand_env(std::string_view in, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size();) {
    if (in[i] == '$' && i + 1 < in.size() && in[i + 1] == '$') {
      out += '$';
      i += 2;
      continue;
    }
    if (in[i] != '$' || i + 1 >= in.size() || in[i + 1] != '{') {
      out += in[i++];
      continue;
    }
    auto close = in.find('}', i);
    if (close == std::string_view::npos) return "unterminated '${' in value";
    auto body = in.substr(i + 2, close - i - 2);
    auto sep = body.find(":-");
    auto name = body.substr(0, sep);
    bool valid = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
    if (!valid) return "invalid environment variable reference '${" + std::string(body) + "}'";
    const char* v = std::getenv(std::string(name).c_str());
    if (v && *v) {
      out += v;
    } else if (sep != std::string_view::npos) {
      out += body.substr(sep + 2);
    } else {
      return "environment variable " + std::string(name) + " is not set (use ${" + std::string(name) +
             ":-default} for a default)";
    }
    i = close + 1;
  }
  return std::nullopt;
}

void yaml_reader::error(const YAML::Mark& at, std::string message) {
  // A file of many mistakes (or one alias repeated many times) is not worth more lines.
  if (out_.size() > caps::errors) return;
  if (out_.size() == caps::errors) {
    out_.push_back({file_, at.line + 1, at.column + 1, "more errors follow; stopped at " + std::to_string(caps::errors)});
    return;
  }
  out_.push_back({file_, at.line + 1, at.column + 1, std::move(message)});
}

namespace {

// Counts the nodes the tree holds with aliases expanded, and how deep it nests, and stops
// at the first cap passed. An alias is the node its anchor names (the same node, at the
// anchor's position), so a collection's totals are worked out once and added again at each
// later reference: a billion laughs or 200,000 copies of one route cost what their text does.
struct size_walk {
  struct totals {
    std::size_t nodes = 0, height = 0;
  };
  const std::string& file;
  std::size_t visited = 0;
  std::optional<diagnostic> problem;
  std::unordered_map<int, totals> seen;  // by position: one entry per collection in the text

  bool fail(const YAML::Node& n, std::string message) {
    problem = diagnostic{file, n.Mark().line + 1, n.Mark().column + 1, std::move(message)};
    return false;
  }

  bool add(const YAML::Node& n, const totals& t, std::size_t depth) {
    visited += t.nodes;
    if (visited > caps::nodes)
      return fail(n, "the configuration expands to more than " + std::to_string(caps::nodes) +
                         " values (YAML aliases expanded): it is refused before it is read");
    if (depth + t.height > caps::depth)
      return fail(n, "the configuration nests deeper than " + std::to_string(caps::depth) + " levels");
    return true;
  }

  // Adds n's subtree (n at `depth`) and returns its totals, or nothing once a cap is passed.
  std::optional<totals> walk(const YAML::Node& n, std::size_t depth) {
    if (!n.IsSequence() && !n.IsMap()) {
      if (!add(n, {1, 0}, depth)) return std::nullopt;
      return totals{1, 0};
    }
    if (auto it = seen.find(n.Mark().pos); it != seen.end()) {
      if (!add(n, it->second, depth)) return std::nullopt;
      return it->second;
    }
    if (!add(n, {1, 0}, depth)) return std::nullopt;
    totals t{1, 0};
    auto child = [&](const YAML::Node& c) {
      auto sub = walk(c, depth + 1);
      if (!sub) return false;
      t.nodes += sub->nodes;
      t.height = std::max(t.height, sub->height + 1);
      return true;
    };
    if (n.IsSequence()) {
      for (const auto& item : n)
        if (!child(item)) return std::nullopt;
    } else {
      for (auto it = n.begin(); it != n.end(); ++it)
        if (!child(it->first) || !child(it->second)) return std::nullopt;
    }
    seen.emplace(n.Mark().pos, t);
    return t;
  }
};

}  // namespace

std::optional<diagnostic> detail::check_size(const YAML::Node& root, const std::string& file) {
  size_walk w{file, 0, std::nullopt, {}};
  if (root) w.walk(root, 0);
  return w.problem;
}

void yaml_reader::error(const YAML::Node& at, std::string message) { error(at.Mark(), std::move(message)); }

yaml_reader::object::object(yaml_reader& r, const YAML::Node& node, std::string_view what) : r_(r), node_(node) {
  if (!node || node.IsNull()) {
    finished_ = true;
    return;
  }
  if (!node.IsMap()) {
    r_.error(node, std::string(what) + " must be a mapping");
    finished_ = true;
    return;
  }
  ok_ = true;
}

YAML::Node yaml_reader::object::get(const std::string& key) {
  known_.push_back(key);
  if (!ok_) return YAML::Node();
  for (auto it = node_.begin(); it != node_.end(); ++it)
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  return YAML::Node();
}

void yaml_reader::object::finish() {
  if (finished_) return;
  finished_ = true;
  std::vector<std::string> seen;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    // yaml-cpp's operator-> yields a temporary: copy the key node, never bind a reference.
    YAML::Node k = it->first;
    if (!k.IsScalar()) {
      r_.error(k, "mapping keys must be plain strings");
      continue;
    }
    const auto& key = k.Scalar();
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      r_.error(k, "duplicate key '" + key + "'");
      continue;
    }
    seen.push_back(key);
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    std::string msg = "unknown key '" + key + "'";
    if (auto hint = did_you_mean(key, known_)) msg += " (did you mean '" + *hint + "'?)";
    r_.error(k, msg);
  }
}

std::optional<std::string> yaml_reader::string(const YAML::Node& n) {
  if (!n.IsScalar()) {
    error(n, n.IsSequence() ? "expected a single value, got a list"
             : n.IsMap()    ? "expected a single value, got a mapping"
                            : "expected a value");
    return std::nullopt;
  }
  std::string out;
  if (auto err = expand_env(n.Scalar(), out)) {
    error(n, *err);
    return std::nullopt;
  }
  return out;
}

std::optional<bool> yaml_reader::boolean(const YAML::Node& n) {
  auto s = string(n);
  if (!s) return std::nullopt;
  if (*s == "true" || *s == "yes" || *s == "on") return true;
  if (*s == "false" || *s == "no" || *s == "off") return false;
  error(n, "expected true or false, got '" + *s + "'");
  return std::nullopt;
}

std::optional<std::uint64_t> yaml_reader::unsigned_int(const YAML::Node& n, std::uint64_t min, std::uint64_t max) {
  auto s = string(n);
  if (!s) return std::nullopt;
  std::uint64_t v = 0;
  bool digits = !s->empty() && s->size() < 20 &&
                std::all_of(s->begin(), s->end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits) v = std::stoull(*s);
  if (!digits || v < min || v > max) {
    error(n, "expected an integer from " + std::to_string(min) + " to " + std::to_string(max) + ", got '" + *s + "'");
    return std::nullopt;
  }
  return v;
}

std::optional<std::string> yaml_reader::one_of(const YAML::Node& n, const std::vector<std::string>& words) {
  auto s = string(n);
  if (!s) return std::nullopt;
  if (std::find(words.begin(), words.end(), *s) != words.end()) return s;
  std::string all;
  for (const auto& w : words) all += (all.empty() ? "" : "|") + w;
  std::string msg = "invalid value '" + *s + "', expected one of " + all;
  if (auto hint = did_you_mean(*s, words)) msg += " (did you mean '" + *hint + "'?)";
  error(n, msg);
  return std::nullopt;
}

bool yaml_reader::within(const YAML::Node& n, std::size_t cap, std::string_view whole, std::string_view items) {
  if (n.size() <= cap) return true;
  error(n, std::string(whole) + " has at most " + std::to_string(cap) + " " + std::string(items) + ", this one has " +
               std::to_string(n.size()));
  return false;
}

std::vector<YAML::Node> yaml_reader::list(const YAML::Node& n, bool scalar_ok) {
  std::vector<YAML::Node> out;
  if (n.IsSequence()) {
    if (within(n, caps::list_items, "a list", "items"))
      for (const auto& item : n) out.push_back(item);
  } else if (scalar_ok && n.IsScalar()) {
    out.push_back(n);
  } else {
    error(n, "expected a list");
  }
  return out;
}

}  // namespace fg::config
