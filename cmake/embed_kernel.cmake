# Script mode: cmake -DINPUT=file -DOUTPUT=file.cpp -DSYMBOL=name -P embed_kernel.cmake
# Writes a C++ file defining `const char SYMBOL[]` (the bytes, NUL-terminated) and
# `const size_t SYMBOL_size`. A byte array, not a raw string, so no source text can break it.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR size "${hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
# Break the array into lines of 16 bytes to keep compilers and diffs happy.
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by cmake/embed_kernel.cmake. Do not edit.\n"
  "#include <cstddef>\n"
  "namespace kjit::jit {\n"
  "extern const char ${SYMBOL}[] = {\n${bytes}0x00};\n"
  "extern const size_t ${SYMBOL}_size = ${size};\n"
  "}  // namespace kjit::jit\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
