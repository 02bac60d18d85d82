# Concatenates the limiter scripts (in order) into a C++ source: the script floodgate sends.
string(REPLACE "|" ";" FILES "${FILES}")
set(content "")
foreach(f ${FILES})
  file(READ ${f} part)
  string(APPEND content "${part}\n")
endforeach()
file(WRITE ${OUT} "// Generated from lua/*.lua by cmake/embed_lua.cmake. Do not edit.\n#include \"limit/script.hpp\"\nnamespace fg::limit {\nconst char* const limiter_script = R\"FGLUA(${content})FGLUA\";\n}\n")
