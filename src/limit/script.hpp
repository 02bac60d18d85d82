#pragma once

namespace fg::limit {
// The limiter script (lua/prelude.lua, the six algorithms, lua/evaluate.lua), embedded at build time.
extern const char* const limiter_script;
}
