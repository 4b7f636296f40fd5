// fp8 block-scaled grouped GEMM on Hopper tensor cores (sm_90a): the bf16 grouped kernel's
// schedule, producer and epilogues (moe_gemm_sm90.cuh, moe_schedule.cuh) around the fp8 GEMM's
// consumer (gemm_fp8_sm90.cuh: wgmma e4m3, each 128-wide K chunk summed from zero and promoted
// into fp32 times its scales), with DeepSeek-V3's scales per expert (moe_params.h,
// MoeGemmFp8Params): scale_a per 1 x 128 group of a row, scale_b per 128 x 128 block of b[e].
//
// A 128-wide tile's columns are one 128-row block of b[e], so one scale of b serves them; the
// SWIGLU tile's halves are 64 gate rows and the matching 64 up rows, two blocks (the up slice at
// I + 64 j stays in one block when I is a multiple of 64, which the host requires). A 256-wide
// tile's halves (promoted in turn: gemm_fp8_sm90.cuh) are two blocks of b, or 128 gate and 128 up
// rows with SWIGLU (I a multiple of 128).
//
// Launch contract: moe_gemm_sm90.cuh's with BN = 128 or 256, IN = 16-bit (e4m3 pairs: the tensor
// maps and k_blocks = ceil(k / 128) count pairs as the fp8 GEMM's do), k a multiple of 16.
#pragma once

#include "gemm/gemm_fp8_sm90.cuh"
#include "moe/moe_gemm_sm90.cuh"

namespace kjit {
namespace moe {

// The fp8 GEMM's parameters of the tile's expert: expert_view's a, b and out, the scales of a
// from the tile's first row, b's scales of the expert.
KJIT_DEVICE KJIT_FORCEINLINE gemm::GemmFp8Params expert_fp8_view(const MoeGemmFp8Params& p,
                                                                 const GroupTile& t,
                                                                 int out_bytes) {
  gemm::GemmFp8Params v;
  v.g = expert_view(p.grouped, t, 1, out_bytes);
  v.scale_a = p.scale_a + t.row0 * p.chunks;
  v.scale_b = p.scale_b + i64(t.expert) * p.n_blocks * p.chunks;
  v.sa_row = p.chunks;
  v.sa_chunk = 1;
  v.sb_row = p.chunks;
  v.sb_chunk = 1;
  v.sb_rows = gemm::kFp8ChunkK;
  return v;
}

// The block scales of a tile's chunks: its two column halves take b's rows lo and hi (the same
// block in a plain 128-wide tile).
template <int BN, bool SWIGLU>
struct TileBlockScales {
  const gemm::GemmFp8Params& v;
  i64 row0, lo, hi;

  KJIT_DEVICE KJIT_FORCEINLINE gemm::ChunkScales operator()(int kb) const {
    const float sb_lo = gemm::scale_b_at(v, lo, kb);
    return gemm::block_scales(v, row0, kb, sb_lo,
                              SWIGLU || BN == 256 ? gemm::scale_b_at(v, hi, kb) : sb_lo);
  }
};

template <int BN, bool SWIGLU>
KJIT_DEVICE KJIT_FORCEINLINE TileBlockScales<BN, SWIGLU> tile_block_scales(
    const gemm::GemmFp8Params& v, int half, int n_tile) {
  static_assert(BN == 128 || BN == 256, "the fp8 grouped tile is 128 or 256 wide");
  const i64 lo = SWIGLU ? i64(n_tile) * (BN / 2) : i64(n_tile) * BN;
  return {v, gemm::fragment_row0(0, half), lo, SWIGLU ? lo + v.g.n / 2 : lo + BN / 2};
}

// TMA_OUT: as moe_gemm_sm90_kernel's.
template <typename OUT, int BN, int STAGES, bool SWIGLU, bool TMA_OUT = false>
__global__ void __launch_bounds__(gemm::kGemmSm90Threads, 1)
    moe_gemm_fp8_sm90_kernel(const __grid_constant__ MoeGemmFp8Params p) {
  using namespace gemm;
  extern __shared__ unsigned char smem_raw[];
  const Ring r = ring_in<STAGES>(smem_raw, (kGemmBlockM + BN) * kFp8ChunkK,
                                 TMA_OUT ? kGemmOutStagingBytes : 0);
  const int k_blocks = static_cast<int>((p.grouped.g.k + kFp8ChunkK - 1) / kFp8ChunkK);
  int m_tile, n_tile;
  band_tile(static_cast<int>(blockIdx.x), p.grouped.tiles_m, p.grouped.tiles_n, m_tile, n_tile);
  init_ring<STAGES>(r.full, r.empty);
  const GroupTile t = block_tile<kGemmBlockM>(p.grouped, m_tile);  // publishes the ring
  if (t.expert < 0) return;
  const int wg = static_cast<int>(threadIdx.x / 128);
  if (wg == 0) {
    hopper::regs_dealloc<kProducerRegs>();
    if (threadIdx.x == 0) {
      produce_expert<u16, BN, STAGES, SWIGLU>(p.grouped.g, r, k_blocks, t, n_tile);
    }
  } else {
    hopper::regs_alloc<kConsumerRegs>();
    const GemmFp8Params v = expert_fp8_view(p, t, sizeof(OUT));
    const int half = wg - 1;
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    consume_fp8_chunks<BN, STAGES>(r.tiles, r.full, r.empty, k_blocks, half, acc,
                                   tile_block_scales<BN, SWIGLU>(v, half, n_tile));
    write_group_tile<__nv_bfloat16, OUT, BN, SWIGLU, TMA_OUT>(p.grouped.g, v.g, t, half, n_tile,
                                                              acc, r.extra, true);
  }
}

}  // namespace moe
}  // namespace kjit
