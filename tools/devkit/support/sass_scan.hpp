// Reading Hopper SASS straight from a cubin's code section, for host-only codegen tests: 16 bytes
// an instruction, the opcode in the low 12 bits of the first 8, its guard predicate in the next
// 4 (bit 15: negated; 7: PT, none) (tests/unit/codegen_order_test.cpp).
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

// The ptxas 13.0 pattern that dropped a TMA coordinate in the persistent SwiGLU grouped GEMM
// (docs/performance.md, "Mixture of experts"): a TMA issued by one lane of a warp runs in an elect
// loop (ELECT, R2UR of the coordinates under the elected lane's predicate, UTMALDG, `@P BRA.U.ANY`
// back while a lane still has P), and P is false for every lane once the loop exits. ptxas set the
// next TMA's row coordinate with `@P R2UR` right after such a loop, before the next loop's ELECT:
// an instruction that never runs, so that TMA reused the previous box's row. Counts the R2UR
// guarded by the predicate of the uniform back branch just before it (no ELECT or branch between)
// that a UTMALDG follows within 32 instructions.
inline int tma_coordinate_under_spent_predicate(const std::string& code) {
  constexpr unsigned kBra = 0x947, kElect = 0x82f, kR2ur = 0x2ca, kUtmaldg = 0x5b4;
  const size_t n = code.size() / 16;
  const auto word = [&](size_t i, int half) {
    uint64_t w;
    std::memcpy(&w, code.data() + 16 * i + 8 * half, 8);
    return w;
  };
  const auto op = [&](size_t i) { return static_cast<unsigned>(word(i, 0) & 0xfff); };
  const auto guard = [&](size_t i) { return static_cast<unsigned>((word(i, 0) >> 12) & 0xf); };
  int found = 0;
  for (size_t i = 0; i < n; ++i) {
    // BRA.U.ANY: bit 20 of the second word (a plain conditional BRA has it clear).
    if (op(i) != kBra || guard(i) == 7 || ((word(i, 1) >> 20) & 1) == 0) continue;
    for (size_t j = i + 1; j < n && j < i + 32; ++j) {
      if (op(j) == kElect || op(j) == kBra) break;
      if (op(j) != kR2ur || guard(j) != guard(i)) continue;
      for (size_t k = j + 1; k < n && k < j + 32; ++k) {
        if (op(k) == kUtmaldg) {
          ++found;
          break;
        }
      }
      break;
    }
  }
  return found;
}

}  // namespace kjit::test
