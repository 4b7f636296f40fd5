// Warp- and block-wide reductions.
#pragma once

#include "common/prelude.cuh"

namespace kjit {

// v, which must be the same in every lane of the warp, as a value ptxas also knows to be: a warp
// reduction (redux.sync) writes a uniform register. Loop bounds and branch conditions built from
// it are provably warp-uniform, so the shuffles under them compile as plain ones, not behind a
// divergence check with a collective copy of each (BRA.DIV, WARPSYNC.COLLECTIVE). Must be called
// by all 32 lanes of the warp.
KJIT_DEVICE KJIT_FORCEINLINE int uniform_int(int v) {
#if __CUDA_ARCH__ >= 800
  return __reduce_max_sync(0xffffffffu, v);
#else
  return v;
#endif
}

// Butterfly (xor) rather than shfl_down so every lane ends up holding the total, which saves a
// broadcast afterwards. With WIDTH < 32 each aligned group of WIDTH lanes gets its own sum (xor
// offsets below WIDTH never cross a group). Must be called by all 32 lanes of the warp.
template <int WIDTH = 32>
KJIT_DEVICE KJIT_FORCEINLINE float warp_reduce_sum(float v) {
  static_assert(WIDTH >= 1 && WIDTH <= 32 && (WIDTH & (WIDTH - 1)) == 0,
                "WIDTH must be a power of two, at most 32");
#pragma unroll
  for (int offset = WIDTH / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Sum over a 1-D block of exactly THREADS threads; every thread gets the total.
//
// smem must hold at least THREADS / 32 floats (unused when THREADS == 32, so it may then be
// null). Must be reached by every thread of the block. The trailing barrier makes it safe to
// call again with the same smem right away; without it a fast warp's next write could overwrite
// a partial that a slow warp has not read yet. ONCE: the caller never writes smem again, so the
// trailing barrier is left out (ptxas kept it ahead of RMSNorm's rsqrt, on the critical path).
template <int THREADS, bool ONCE = false>
KJIT_DEVICE KJIT_FORCEINLINE float block_reduce_sum(float v, float* smem) {
  static_assert(THREADS >= 32 && THREADS <= 1024 && THREADS % 32 == 0,
                "block_reduce_sum needs a multiple of 32 threads, at most 1024");
  constexpr int kWarps = THREADS / 32;
  v = warp_reduce_sum(v);
  if constexpr (kWarps == 1) {
    (void)smem;
    return v;
  } else {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    // Every warp reduces the partials itself instead of one warp reducing and broadcasting
    // through shared memory: same shuffle count, one barrier fewer.
    if constexpr ((kWarps & (kWarps - 1)) == 0) {
      // A power of two: each aligned group of kWarps lanes holds every partial and reduces them
      // in log2(kWarps) dependent shuffles instead of 5. Same sums in the same order as adding
      // the other lanes' zeros (which changes nothing: no partial is -0.0, every caller's sums
      // start from +0.0), so the total is bitwise what it was.
      v = smem[lane & (kWarps - 1)];
      v = warp_reduce_sum<kWarps>(v);
    } else {
      v = lane < kWarps ? smem[lane] : 0.0f;
      v = warp_reduce_sum(v);
    }
    if constexpr (!ONCE) __syncthreads();
    return v;
  }
}

}  // namespace kjit
