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
// The epilogue is the wgmma kernels' (epilogue.cuh store_fragment), from the registers.
//
// Launch contract: grid ceil(m / 128) * ceil(n / BN) blocks (band_tile maps them),
// kGemmMmaThreads threads, gemm_mma_sm80_smem_bytes(BN, STAGES) bytes of dynamic shared memory.
// a and b: 16-byte aligned bases and row strides (or a single row); any k. out must not overlap
// a, b or bias.
#pragma once

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

// One stage's a (128 rows) and b (BN rows) tiles of K block kb.
template <typename IN, int BN>
KJIT_DEVICE KJIT_FORCEINLINE void load_stage(const GemmParams& p, unsigned char* stage, i64 m0,
                                             i64 n0, int kb) {
  constexpr i64 es = sizeof(IN);
  const i64 k0 = i64(kb) * kGemmMmaBlockK * es;
  load_tile_rows<kGemmMmaBlockM>(stage, static_cast<const unsigned char*>(p.a), p.a_stride * es,
                                 p.m, m0, p.k * es, k0);
  load_tile_rows<BN>(stage + MmaSm80Tile<BN>::kABytes, static_cast<const unsigned char*>(p.b),
                     p.b_stride * es, p.n, n0, p.k * es, k0);
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
  for (int ks = 0; ks < kGemmMmaBlockK / 16; ++ks) {
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
        mma_16816<IN>(acc[i][2 * j2], af[i], bf[j2][0], bf[j2][1]);
        mma_16816<IN>(acc[i][2 * j2 + 1], af[i], bf[j2][2], bf[j2][3]);
      }
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
  static_assert(STAGES >= 2, "a ring of at least two stages");
  using T = MmaSm80Tile<BN>;
  // 128-byte aligned, so the swizzle's bank groups are the hardware's.
  extern __shared__ __align__(128) unsigned char smem_raw[];
  int m_tile, n_tile;
  band_tile(static_cast<int>(blockIdx.x),
            static_cast<int>((p.m + kGemmMmaBlockM - 1) / kGemmMmaBlockM),
            static_cast<int>((p.n + BN - 1) / BN), m_tile, n_tile);
  const i64 m0 = i64(m_tile) * kGemmMmaBlockM;
  const i64 n0 = i64(n_tile) * BN;
  const int k_blocks = static_cast<int>((p.k + kGemmMmaBlockK - 1) / kGemmMmaBlockK);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int wm = warp / T::kWarpsN;
  const int wn = warp % T::kWarpsN;

  float acc[T::kMTiles][T::kNTiles][4];
#pragma unroll
  for (int i = 0; i < T::kMTiles; ++i) {
#pragma unroll
    for (int j = 0; j < T::kNTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    }
  }

  // One commit group per K block (empty past the last), so waiting for all but STAGES - 2 groups
  // always means "block kb has landed".
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_blocks) load_stage<IN, BN>(p, smem_raw + s * T::kStageBytes, m0, n0, s);
    cp_async_commit();
  }
  for (int kb = 0; kb < k_blocks; ++kb) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = kb + STAGES - 1;
    if (next < k_blocks) {
      load_stage<IN, BN>(p, smem_raw + (next % STAGES) * T::kStageBytes, m0, n0, next);
    }
    cp_async_commit();
    mma_stage<IN, BN>(smem_raw + (kb % STAGES) * T::kStageBytes, wm, wn, lane, acc);
  }
  cp_async_wait<0>();

  const bool pairs = out_pairs_ok<OUT>(p);
  const i64 row0 = m0 + wm * T::kWarpM + lane / 4;
  const i64 col0 = n0 + wn * T::kWarpN + (lane % 4) * 2;
#pragma unroll
  for (int i = 0; i < T::kMTiles; ++i) {
#pragma unroll
    for (int j = 0; j < T::kNTiles; ++j) {
      if (col0 + j * 8 >= p.n) break;
      store_fragment<IN, OUT>(p, row0 + i * 16, col0 + j * 8, acc[i][j], pairs);
    }
  }
}

}  // namespace gemm
}  // namespace kjit
