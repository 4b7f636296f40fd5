// The fp8 GEMM on mma.sync tensor cores (sm_89+: Ada and Hopper): every call the sm90 kernel cannot
// take whose rows cp.async can copy (16-byte aligned bases and row strides), e.g. a k that is not a
// multiple of 16 inside aligned rows, or an sm_89 / plain sm_90 device. The sm_80 GEMM's pipeline
// (gemm_mma_sm80.cuh: cp.async ring, swizzled 64-byte rows, ldmatrix) over e4m3 bytes, one
// mma.sync.m16n8k32 per 32 of K, and the fallback's scales (kernels/gemm/gemm_fp8_params.h): the
// sums of each 128-wide K chunk (two K blocks) are added to the fp32 result times the chunk's
// scales, which serves every scale mode with one code path and bounds what the tensor cores'
// accumulation can lose to one chunk (ref::gemm_fp8_error_bound).
//
// Launch contract: grid ceil(m / 128) * ceil(n / BN) blocks, kGemmMmaThreads threads,
// gemm_mma_sm80_smem_bytes(BN, STAGES) bytes of dynamic shared memory. out must not overlap a, b
// or the scales.
#pragma once

#include "gemm/fp8_scales.cuh"
#include "gemm/gemm_fp8_params.h"
#include "gemm/gemm_mma_sm80.cuh"

namespace kjit {
namespace gemm {

// BN 64 only: the chunk's partial sums double the accumulators (2 x 32 a thread; 2 x 64 at BN 128
// would spill). ptxas gives 118 registers for sm_89 (two blocks an SM) and 152 for sm_90 (one; a
// bound of two spills 24 bytes there).
template <typename OUT, int BN, int STAGES>
__global__ void __launch_bounds__(kGemmMmaThreads)
    gemm_fp8_mma_kernel(const __grid_constant__ GemmFp8Params p) {
  using T = MmaSm80Tile<BN>;
  constexpr int kBlocksPerChunk = kFp8ChunkK / T::kRowBytes;
  static_assert(kBlocksPerChunk * T::kRowBytes == kFp8ChunkK, "chunks of whole K blocks");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const MmaSm80Block<BN> blk(p.g, 1);
  MmaSm80Acc<BN> acc, part;
  zero_acc<BN>(acc);
  // After a chunk's last K block: acc += part * scale_a(row, chunk) * scale_b(col, chunk), part =
  // 0.
  const auto promote = [&](int kb) {
    if ((kb + 1) % kBlocksPerChunk != 0 && kb + 1 != blk.k_blocks) return;
    const i64 c = kb / kBlocksPerChunk;
#pragma unroll
    for (int i = 0; i < T::kMTiles; ++i) {
      const float sa[2] = {scale_a_at(p, blk.row0() + i * 16, c),
                           scale_a_at(p, blk.row0() + i * 16 + 8, c)};
#pragma unroll
      for (int j = 0; j < T::kNTiles; ++j) {
        const float sb[2] = {scale_b_at(p, blk.col0() + j * 8, c),
                             scale_b_at(p, blk.col0() + j * 8 + 1, c)};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          acc[i][j][e] = fmaf(part[i][j][e], sa[e / 2] * sb[e % 2], acc[i][j][e]);
          part[i][j][e] = 0.0f;
        }
      }
    }
  };
  mma_sm80_mainloop<E4M3, BN, STAGES>(p.g, smem_raw, blk, part, promote);
  mma_sm80_store<__nv_bfloat16, OUT, BN>(p.g, blk, acc);
}

}  // namespace gemm
}  // namespace kjit
