#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/yaml_reader.hpp"

namespace fg::config {

// Reads a configuration file's text into `text`, bounded: a regular file only (a FIFO,
// a device such as /dev/zero or a directory is refused at once, without blocking on
// it, whether named directly or through symlinks), of at most caps::file_bytes (the
// size is checked before reading, and the read stops past it if the file grows).
// Nothing, or the problem as a diagnostic naming the file.
std::optional<diagnostic> read_source_file(const std::string& path, std::string& text);
// The same for another file the configuration names (`what`: "a consumer file"), of at
// most `max_bytes`.
std::optional<diagnostic> read_bounded_file(const std::string& path, std::string& text, std::uint64_t max_bytes,
                                            std::string_view what);

}  // namespace fg::config
