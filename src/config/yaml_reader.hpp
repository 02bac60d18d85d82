#pragma once
#include <yaml-cpp/yaml.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fg::config {

struct diagnostic {
  std::string file;
  int line = 0;    // 1-based
  int column = 0;  // 1-based
  std::string message;
  std::string str() const;
};

// Closest candidate by edit distance, if it is close enough to be a plausible typo.
std::optional<std::string> did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

// Expands ${VAR} and ${VAR:-default}; returns an error message for an unset ${VAR}.
std::optional<std::string> expand_env(std::string_view in, std::string& out);

// Reads YAML nodes into plain values, collecting every problem with its line and column.
class yaml_reader {
 public:
  yaml_reader(std::string file, std::vector<diagnostic>& out) : file_(std::move(file)), out_(out) {}

  void error(const YAML::Node& at, std::string message);
  void error(const YAML::Mark& at, std::string message);

  // Whether requests can carry a verified client certificate (tls.client_ca is set):
  // a key source client_cert is refused without (the loader sets it after tls:).
  bool client_certificates = false;

  // A mapping; keys not asked for by get() are reported as unknown by finish().
  class object {
   public:
    object(yaml_reader& r, const YAML::Node& node, std::string_view what);
    YAML::Node get(const std::string& key);
    bool ok() const { return ok_; }
    const YAML::Node& node() const { return node_; }
    void finish();
    ~object() { finish(); }
    object(const object&) = delete;
    object& operator=(const object&) = delete;

   private:
    yaml_reader& r_;
    YAML::Node node_;
    bool ok_ = false;
    bool finished_ = false;
    std::vector<std::string> known_;
  };

  std::optional<std::string> string(const YAML::Node& n);
  std::optional<bool> boolean(const YAML::Node& n);
  std::optional<std::uint64_t> unsigned_int(const YAML::Node& n, std::uint64_t min, std::uint64_t max);
  // One of the given words; else "expected one of a|b|c".
  std::optional<std::string> one_of(const YAML::Node& n, const std::vector<std::string>& words);
  // A string that `parse` accepts; else "<what>: <hint>".
  template <class T, class F>
  std::optional<T> parsed(const YAML::Node& n, F&& parse, std::string_view hint) {
    auto s = string(n);
    if (!s) return std::nullopt;
    auto v = parse(*s);
    if (!v) {
      // hint is "what (want ...)": the value goes between the two parts.
      auto paren = hint.find(" (");
      error(n, "invalid " + std::string(hint.substr(0, paren)) + " '" + *s + "'" +
                   std::string(paren == std::string_view::npos ? "" : hint.substr(paren)));
    }
    return v;
  }
  // A sequence, or (when `scalar_ok`) a single scalar treated as a one-item list.
  std::vector<YAML::Node> list(const YAML::Node& n, bool scalar_ok);
  // True if `n` has at most `cap` items; else "<whole> has at most <cap> <items>, this
  // one has <size>" at `n`, and false.
  bool within(const YAML::Node& n, std::size_t cap, std::string_view whole, std::string_view items);

  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::vector<diagnostic>& out_;
};

}  // namespace fg::config
