// GEMM on sm_80+ tensor cores (mma.sync): out = alpha * a . b^T + beta * out + bias, bf16 or fp16
// operands, fp32 accumulators, bf16 / fp16 / fp32 out (kernels/gemm/gemm_params.h). The path of
// every sm_80+ device the sm_90a kernels do not serve (sm_80 .. sm_89, sm_90 without the `a`
// features, later archs) and of the calls TMA cannot describe.
//
// One block per 128 x BN output tile (BN 64 or 128), eight warps of 64 x 32 (BN 128) or 32 x 32
// (BN 64) outputs. K runs in blocks of 32 through a ring of STAGES shared-memory stages filled
// with 16-byte cp.async copies (zero fill past the M, N and K edges), each tile's 64-byte rows
// XOR-swizzled (common/mma_sm80.cuh swz<64>) so the copies and the ldmatrix reads are free of
// bank conflicts. Per K block each warp loads its fragments with ldmatrix.x4 and issues
// mma.sync.m16n8k16 (two k16 steps); one __syncthreads per K block both publishes the stage that
// is about to be read and frees the stage the next copy overwrites (read one block earlier).
// The epilogue is the wgmma kernels' (epilogue.cuh store_fragment), from the registers. The fp8
// GEMM's mma.sync kernel (gemm_fp8_mma.cuh) runs the same K loop over e4m3 bytes.
//
// Launch contract: grid ceil(m / 128) * ceil(n / BN) blocks (band_tile maps them),
// kGemmMmaThreads threads, gemm_mma_sm80_smem_bytes(BN, STAGES) bytes of dynamic shared memory.
// a and b: 16-byte aligned bases and row strides (or a single row); any k. out must not overlap
// a, b or bias.
#pragma once

#include "common/fp8.cuh"
#include "common/mma_sm80.cuh"
#include "common/prelude.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/gemm_params.h"
#include "gemm/tile_order.cuh"

namespace kjit {
namespace gemm {

// The warp grid of a BN-wide tile: 2 x 4 warps of 64 x 32 at BN 128 (each K step loads 6
// ldmatrix.x4 for 16 mma), 4 x 2 warps of 32 x 32 at BN 64.
template <int BN>
struct MmaSm80Tile {
  static_assert(BN == 64 || BN == 128, "BN is 64 or 128");
  static constexpr int kRowBytes = kGemmMmaBlockK * 2;
  static constexpr int kWarpsN = BN == 128 ? 4 : 2;
  static constexpr int kWarpsM = kGemmMmaThreads / 32 / kWarpsN;
  static constexpr int kWarpM = kGemmMmaBlockM / kWarpsM;
  static constexpr int kWarpN = BN / kWarpsN;
  static constexpr int kMTiles = kWarpM / 16;  // m16 tiles per warp
  static constexpr int kNTiles = kWarpN / 8;   // n8 tiles per warp
  static constexpr int kABytes = kGemmMmaBlockM * kRowBytes;
  static constexpr int kStageBytes = (kGemmMmaBlockM + BN) * kRowBytes;
};

// Copies the K block at byte k0 of rows row0 .. row0 + ROWS - 1 of x (`rows` rows, `row_bytes`
// apart, `k_bytes` of K each) into `tile`. Chunks past the edges are zero-filled (a partial chunk
// at the K edge reads only its bytes).
template <int ROWS>
KJIT_DEVICE KJIT_FORCEINLINE void load_tile_rows(unsigned char* tile, const unsigned char* x,
                                                 i64 row_bytes, i64 rows, i64 row0, i64 k_bytes,
                                                 i64 k0) {
  constexpr int kChunksPerRow = kGemmMmaBlockK * 2 / 16;
  static_assert(ROWS * kChunksPerRow % kGemmMmaThreads == 0, "whole copies per thread");
#pragma unroll
  for (int e = 0; e < ROWS * kChunksPerRow / kGemmMmaThreads; ++e) {
    const int idx = static_cast<int>(threadIdx.x) + e * kGemmMmaThreads;
    const int r = idx / kChunksPerRow;
    const int ch = idx % kChunksPerRow;
    const i64 at = k0 + ch * 16;
    const i64 left = row0 + r < rows ? k_bytes - at : 0;
    const int bytes = left <= 0 ? 0 : left >= 16 ? 16 : static_cast<int>(left);
    const unsigned char* src = bytes > 0 ? x + (row0 + r) * row_bytes + at : x;
    cp_async<16>(smem_addr(tile + swz<kGemmMmaBlockK * 2>(r, ch)), src, bytes);
  }
}

// One stage's a (128 rows) and b (BN rows) tiles of K block kb (64 bytes of K: 32 bf16 / fp16 or
// 64 e4m3).
template <typename IN, int BN>
KJIT_DEVICE KJIT_FORCEINLINE void load_stage(const GemmParams& p, unsigned char* stage, i64 m0,
                                             i64 n0, int kb) {
  constexpr i64 es = sizeof(IN);
  const i64 k0 = i64(kb) * MmaSm80Tile<BN>::kRowBytes;
  load_tile_rows<kGemmMmaBlockM>(stage, static_cast<const unsigned char*>(p.a), p.a_stride * es,
                                 p.m, m0, p.k * es, k0);
  load_tile_rows<BN>(stage + MmaSm80Tile<BN>::kABytes, static_cast<const unsigned char*>(p.b),
                     p.b_stride * es, p.n, n0, p.k * es, k0);
}

// One MMA over 32 bytes of K: m16n8k16 of bf16 / fp16, m16n8k32 of e4m3.
template <typename IN>
KJIT_DEVICE KJIT_FORCEINLINE void mma_32_bytes(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if constexpr (sizeof(IN) == 1) {
    mma_16832_e4m3(d, a, b0, b1);
  } else {
    mma_16816<IN>(d, a, b0, b1);
  }
}

// The warp's MMAs over one stage: its kMTiles x kNTiles accumulator tiles at warp position
// (wm, wn) of the block.
template <typename IN, int BN>
KJIT_DEVICE KJIT_FORCEINLINE void mma_stage(
    const unsigned char* stage, int wm, int wn, int lane,
    float (&acc)[MmaSm80Tile<BN>::kMTiles][MmaSm80Tile<BN>::kNTiles][4]) {
  using T = MmaSm80Tile<BN>;
  const unsigned char* a_tile = stage;
  const unsigned char* b_tile = stage + T::kABytes;
#pragma unroll
  for (int ks = 0; ks < T::kRowBytes / 32; ++ks) {
    u32 af[T::kMTiles][4];
    u32 bf[T::kNTiles / 2][4];
#pragma unroll
    for (int i = 0; i < T::kMTiles; ++i) {
      // Matrices: rows 0-7 / 8-15 at k 0-7, then the same rows at k 8-15 (a0 .. a3).
      const int r = wm * T::kWarpM + i * 16 + (lane & 15);
      ldmatrix_x4(af[i], smem_addr(a_tile + swz<T::kRowBytes>(r, 2 * ks + (lane >> 4))));
    }
#pragma unroll
    for (int j2 = 0; j2 < T::kNTiles / 2; ++j2) {
      // b rows (n) 0-7 at k 0-7 and k 8-15 (one n8 tile's b0, b1), then rows 8-15.
      const int r = wn * T::kWarpN + j2 * 16 + (lane & 7) + (lane >> 4) * 8;
      ldmatrix_x4(bf[j2], smem_addr(b_tile + swz<T::kRowBytes>(r, 2 * ks + ((lane >> 3) & 1))));
    }
#pragma unroll
    for (int i = 0; i < T::kMTiles; ++i) {
#pragma unroll
      for (int j2 = 0; j2 < T::kNTiles / 2; ++j2) {
        mma_32_bytes<IN>(acc[i][2 * j2], af[i], bf[j2][0], bf[j2][1]);
        mma_32_bytes<IN>(acc[i][2 * j2 + 1], af[i], bf[j2][2], bf[j2][3]);
      }
    }
  }
}

// The block's tile and its warp's place in it, from the launch (band_tile's order).
template <int BN>
struct MmaSm80Block {
  using T = MmaSm80Tile<BN>;
  i64 m0, n0;  // the tile's first row and column
  int k_blocks, lane, wm, wn;
  KJIT_DEVICE KJIT_FORCEINLINE MmaSm80Block(const GemmParams& p, int elem_bytes) {
    int m_tile, n_tile;
    band_tile(static_cast<int>(blockIdx.x),
              static_cast<int>((p.m + kGemmMmaBlockM - 1) / kGemmMmaBlockM),
              static_cast<int>((p.n + BN - 1) / BN), m_tile, n_tile);
    m0 = i64(m_tile) * kGemmMmaBlockM;
    n0 = i64(n_tile) * BN;
    k_blocks = static_cast<int>((p.k * elem_bytes + T::kRowBytes - 1) / T::kRowBytes);
    lane = static_cast<int>(threadIdx.x % 32);
    const int warp = static_cast<int>(threadIdx.x / 32);
    wm = warp / T::kWarpsN;
    wn = warp % T::kWarpsN;
  }
  // The thread's first output row and column (accumulator tile (i, j) adds 16 i rows, 8 j columns).
  KJIT_DEVICE KJIT_FORCEINLINE i64 row0() const { return m0 + wm * T::kWarpM + lane / 4; }
  KJIT_DEVICE KJIT_FORCEINLINE i64 col0() const { return n0 + wn * T::kWarpN + (lane % 4) * 2; }
};

template <int BN>
using MmaSm80Acc = float[MmaSm80Tile<BN>::kMTiles][MmaSm80Tile<BN>::kNTiles][4];

template <int BN>
KJIT_DEVICE KJIT_FORCEINLINE void zero_acc(MmaSm80Acc<BN>& acc) {
#pragma unroll
  for (int i = 0; i < MmaSm80Tile<BN>::kMTiles; ++i) {
#pragma unroll
    for (int j = 0; j < MmaSm80Tile<BN>::kNTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    }
  }
}

// The K loop: every K block through the ring into acc (zeroed here), after_block(kb) after each
// block's MMAs. One commit group per K block (empty past the last), so waiting for all but
// STAGES - 2 groups always means "block kb has landed"; one __syncthreads per block both publishes
// it and frees the stage the next copy overwrites (read one block earlier).
template <typename IN, int BN, int STAGES, class AfterBlock>
KJIT_DEVICE KJIT_FORCEINLINE void mma_sm80_mainloop(const GemmParams& p, unsigned char* smem,
                                                    const MmaSm80Block<BN>& blk,
                                                    MmaSm80Acc<BN>& acc, AfterBlock after_block) {
  static_assert(STAGES >= 2, "a ring of at least two stages");
  using T = MmaSm80Tile<BN>;
  zero_acc<BN>(acc);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < blk.k_blocks) load_stage<IN, BN>(p, smem + s * T::kStageBytes, blk.m0, blk.n0, s);
    cp_async_commit();
  }
  for (int kb = 0; kb < blk.k_blocks; ++kb) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = kb + STAGES - 1;
    if (next < blk.k_blocks) {
      load_stage<IN, BN>(p, smem + (next % STAGES) * T::kStageBytes, blk.m0, blk.n0, next);
    }
    cp_async_commit();
    mma_stage<IN, BN>(smem + (kb % STAGES) * T::kStageBytes, blk.wm, blk.wn, blk.lane, acc);
    after_block(kb);
  }
  cp_async_wait<0>();
}

// The epilogue of the block's tile (epilogue.cuh), BIAS typing the bias.
template <typename BIAS, typename OUT, int BN>
KJIT_DEVICE KJIT_FORCEINLINE void mma_sm80_store(const GemmParams& p, const MmaSm80Block<BN>& blk,
                                                 const MmaSm80Acc<BN>& acc) {
  using T = MmaSm80Tile<BN>;
  const bool pairs = out_pairs_ok<OUT>(p);
#pragma unroll
  for (int i = 0; i < T::kMTiles; ++i) {
#pragma unroll
    for (int j = 0; j < T::kNTiles; ++j) {
      if (blk.col0() + j * 8 >= p.n) break;
      store_fragment<BIAS, OUT>(p, blk.row0() + i * 16, blk.col0() + j * 8, acc[i][j], pairs);
    }
  }
}

// At the default depths two blocks share an SM (2 x 48 KB of stages; at most 128 registers a
// thread: ptxas gives 126 at BN 128 without a minimum-blocks bound, and spills 8 bytes with one),
// so one block's MMAs run while the other waits at its barrier.
template <typename IN, typename OUT, int BN, int STAGES>
__global__ void __launch_bounds__(kGemmMmaThreads)
    gemm_mma_sm80_kernel(const __grid_constant__ GemmParams p) {
  static_assert(sizeof(IN) == 2, "mma.sync m16n8k16 operands here are bf16 or fp16");
  // 128-byte aligned, so the swizzle's bank groups are the hardware's.
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const MmaSm80Block<BN> blk(p, sizeof(IN));
  MmaSm80Acc<BN> acc;
  mma_sm80_mainloop<IN, BN, STAGES>(p, smem_raw, blk, acc, [](int) {});
  mma_sm80_store<IN, OUT, BN>(p, blk, acc);
}

}  // namespace gemm
}  // namespace kjit
