// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator, so a draw is a pure function of (key, counter) and needs no state
// between calls. That is what makes sampling deterministic for a given seed and offset, and what
// lets a captured CUDA graph draw fresh numbers when the engine bumps the offset in device memory.
//
// kjit's stream layout: key = seed (64 bits), counter = (offset low, offset high, subsequence,
// draw) where the subsequence is the batch row (or 0 when every row has its own seed) and draw
// numbers a row's draws within one call (0 for the samplers' one draw). One block of four words
// per draw; words 0 and 1 make the uniform.
#pragma once

#include "common/prelude.cuh"

namespace kjit {
namespace sampling {

struct Philox4 {
  u32 x, y, z, w;
};

KJIT_DEVICE KJIT_FORCEINLINE Philox4 philox4x32_10(Philox4 ctr, u32 k0, u32 k1) {
  constexpr u32 kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr u32 kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const u32 hi0 = __umulhi(kM0, ctr.x), lo0 = kM0 * ctr.x;
    const u32 hi1 = __umulhi(kM1, ctr.z), lo1 = kM1 * ctr.z;
    ctr = {hi1 ^ ctr.y ^ k0, lo1, hi0 ^ ctr.w ^ k1, lo0};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// 53 random bits from counter word 3 = `draw` (an op that needs several numbers per row per call
// numbers them 0, 1, ...): the uniform u = bits * 2^-53 in [0, 1).
KJIT_DEVICE KJIT_FORCEINLINE u64 philox_bits53_at(u64 seed, u64 offset, u32 subsequence, u32 draw) {
  const Philox4 r = philox4x32_10({u32(offset), u32(offset >> 32), subsequence, draw}, u32(seed),
                                  u32(seed >> 32));
  return (u64(r.x) << 21) ^ u64(r.y >> 11);
}

// The uniform as a double (exact: 53 bits), so that u * total keeps the resolution of a
// 262144-token row's cumulative sum.
KJIT_DEVICE KJIT_FORCEINLINE double philox_uniform_at(u64 seed, u64 offset, u32 subsequence,
                                                      u32 draw) {
  return double(philox_bits53_at(seed, offset, subsequence, draw)) *
         (1.0 / 9007199254740992.0);  // 2^-53
}

// The samplers' one draw of a row: its bits (the integer draw takes floor(u * total) from them).
KJIT_DEVICE KJIT_FORCEINLINE u64 philox_bits53(u64 seed, u64 offset, u32 subsequence) {
  return philox_bits53_at(seed, offset, subsequence, 0u);
}

}  // namespace sampling
}  // namespace kjit
