#pragma once
#include <string>
#include <variant>
#include <vector>

#include "config/config.hpp"
#include "config/yaml_reader.hpp"

namespace fg::config {

struct load_result {
  std::shared_ptr<config> cfg;        // set when there are no errors
  std::vector<diagnostic> errors;     // every problem found, in file order
  bool ok() const { return cfg && errors.empty(); }
};

// Parses and validates a configuration file.
load_result load_file(const std::string& path);
// Same, from text (`name` is used in messages).
load_result load_string(const std::string& text, const std::string& name);

}  // namespace fg::config
