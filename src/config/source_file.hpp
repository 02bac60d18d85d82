#pragma once
#include <optional>
#include <string>

#include "config/yaml_reader.hpp"

namespace fg::config {

// Reads a configuration file's text into `text`, bounded: a regular file only (a FIFO,
// a device such as /dev/zero or a directory is refused at once, without blocking on
// it, whether named directly or through symlinks), of at most caps::file_bytes (the
// size is checked before reading, and the read stops past it if the file grows).
// Nothing, or the problem as a diagnostic naming the file.
std::optional<diagnostic> read_source_file(const std::string& path, std::string& text);

}  // namespace fg::config
