// Reading Hopper SASS straight from a cubin's code section, for host-only codegen tests: 16 bytes
// an instruction, the opcode in the low 12 bits of the first 8 (tests/unit/codegen_order_test.cpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace kjit::test {

// STL (0x387) and LDL (0x983) instructions in `code`: local memory, i.e. a spill.
inline int local_memory_ops(const std::string& code) {
  int n = 0;
  for (size_t off = 0; off + 16 <= code.size(); off += 16) {
    uint64_t lo;
    std::memcpy(&lo, code.data() + off, 8);
    const unsigned op12 = lo & 0xfff;
    n += op12 == 0x387 || op12 == 0x983;
  }
  return n;
}

}  // namespace kjit::test
