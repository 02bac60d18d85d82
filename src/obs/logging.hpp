#pragma once
#include <string>

namespace fg::obs {

// Sets up the process logger (stderr) at the given level: trace|debug|info|warn|error.
void init_logging(const std::string& level);

}  // namespace fg::obs
