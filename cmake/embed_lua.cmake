# Writes the Lua scripts floodgate sends into a C++ source: the limiter script (FILES,
# concatenated in order) and the lease renewal (RENEW).
string(REPLACE "|" ";" FILES "${FILES}")
set(content "")
foreach(f ${FILES})
  file(READ ${f} part)
  string(APPEND content "${part}\n")
endforeach()
file(READ ${RENEW} renew)
file(WRITE ${OUT} "// Generated from lua/*.lua by cmake/embed_lua.cmake. Do not edit.\n#include \"store/limiter_script.hpp\"\nnamespace fg::store {\nconst char* const limiter_script = R\"FGLUA(${content})FGLUA\";\nconst char* const renew_lease_script = R\"FGLUA(${renew})FGLUA\";\n}\n")
