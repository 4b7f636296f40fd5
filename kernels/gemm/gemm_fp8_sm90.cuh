// fp8 (e4m3) GEMM on Hopper tensor cores (sm_90a): the bf16 kernel's pipeline (gemm_sm90.cuh:
// ring protocol, producer, tile order, epilogue) around wgmma m64nBNk32 e4m3, and the scales of
// kernels/gemm/gemm_fp8_params.h.
//
// A stage holds 128 of K (one scale chunk): 128 x 128 bytes of a and BN x 128 of b, 4 wgmma k32
// per consumer. Each stage's MMAs start from zero in a second set of registers, and once they
// complete that partial sum is added to the fp32 result ("promotion"), times
// scale_a(row, chunk) * scale_b(tile, chunk) for blocks (BLOCK true; a 128-wide tile's columns
// share one scale of b); per tensor / per row (BLOCK false) the scales multiply the result once
// before the epilogue. The tensor cores add fp8 products into an accumulator of 14 significant
// bits, truncating: summed there over all of K, the error grows with the partial sum (the first
// H200 run of this kernel missed the fp64 reference by 0.3-1% of the result at k = 2048 - 8192);
// promoted per chunk (CUTLASS's and DeepGEMM's choice too), it is bounded per 128 of K and the
// chunks add in fp32 (ref::gemm_fp8_error_bound derives the bound the tests hold it to). The cost
// is a wait for each stage's MMAs before the next are issued; the stage goes back to the producer
// as soon as they are done.
//
// Launch contract: gemm_sm90.cuh's with BN = 128 (or 192 without block scales), p.g.tma_a /
// p.g.tma_b describing a and b as rows of k / 2 16-bit elements (k a multiple of 16, 16-byte
// aligned bases and row strides).
#pragma once

#include "gemm/fp8_scales.cuh"
#include "gemm/gemm_sm90.cuh"

namespace kjit {
namespace gemm {

// One stage's 4 k32 MMAs into d, from zero, issued and committed (not waited for).
template <int BN>
KJIT_DEVICE KJIT_FORCEINLINE void mma_stage(float (&d)[BN / 2], u32 a_base, u32 b_base) {
  wgmma::fence_operands(d);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kFp8ChunkK / 32; ++kk) {
    wgmma::mma_e4m3<BN>(d, wgmma::kmajor_sw128_desc(a_base + kk * 32),
                        wgmma::kmajor_sw128_desc(b_base + kk * 32), kk > 0);
  }
  wgmma::commit_group();
}

// Waits for ring stage s (in phase `phase`), multiplies its chunk into part from zero, waits for
// the MMAs and hands the stage back to the producer (one arrival per warp; pair: release_stage's).
template <int BN>
KJIT_DEVICE KJIT_FORCEINLINE void mma_chunk(float (&part)[BN / 2], u64* full, u64* empty, int s,
                                            int phase, u32 a_base, u32 b_base, bool pair = false) {
  hopper::mbarrier_wait(&full[s], phase);
  mma_stage<BN>(part, a_base, b_base);
  wgmma::wait_group<0>();
  wgmma::fence_operands(part);
  if (threadIdx.x % 32 == 0) release_stage(empty, s, pair);
}

// The first of the two rows of a consumer thread's registers in tile m_tile (the other is 8
// further: register i is at row row0 + 8 ((i / 2) % 2), common/wgmma.cuh).
KJIT_DEVICE KJIT_FORCEINLINE i64 fragment_row0(int m_tile, int half) {
  const int t = static_cast<int>(threadIdx.x % 128);
  return i64(m_tile) * kGemmBlockM + half * 64 + (t / 32) * 16 + (t % 32) / 4;
}

// The scales of one K chunk for a consumer thread's registers: s[r][h] multiplies the chunk's sum
// at row row0 + 8 r (fragment_row0) in column half h of the tile (columns 0 .. BN / 2 - 1 and
// BN / 2 .. BN - 1: register i is in half i >= BN / 4). The halves differ only in the MoE SwiGLU
// tile, whose halves are gate and up rows of b in different 128-row scale blocks.
struct ChunkScales {
  float s[2][2];
};

// DeepSeek-V3 block scales of chunk `chunk` for rows row0, row0 + 8 and b scales sb_lo / sb_hi
// of the two column halves.
KJIT_DEVICE KJIT_FORCEINLINE ChunkScales block_scales(const GemmFp8Params& p, i64 row0, i64 chunk,
                                                      float sb_lo, float sb_hi) {
  const float sa0 = scale_a_at(p, row0, chunk);
  const float sa1 = scale_a_at(p, row0 + 8, chunk);
  return ChunkScales{{{sa0 * sb_lo, sa0 * sb_hi}, {sa1 * sb_lo, sa1 * sb_hi}}};
}

// The promotion loop of consumer `half` (0 or 1): per stage (one 128-wide K chunk) the MMAs from
// zero into a second set of registers, then acc += part * scales(kb) (a ChunkScales; called
// before the stage's wait so the scale loads' latency hides behind it). it0: the ring's running
// stage count at chunk 0, as gemm::consume's (every stage is released, the last one too). pair:
// the block is one of a pair (produce_pair_rows), whose releases reach both blocks.
template <int BN, int STAGES, typename Scales>
KJIT_DEVICE KJIT_FORCEINLINE void consume_fp8_chunks(unsigned char* tiles, u64* full, u64* empty,
                                                     int k_blocks, int half, float (&acc)[BN / 2],
                                                     Scales scales, int it0 = 0,
                                                     bool pair = false) {
  constexpr u32 kABytes = kGemmBlockM * kFp8ChunkK;
  constexpr u32 kStageBytes = (kGemmBlockM + BN) * kFp8ChunkK;
  for (int kb = 0; kb < k_blocks; ++kb) {
    const int use = it0 + kb;  // the ring's running count
    const int s = use % STAGES;
    const ChunkScales c = scales(kb);
    const u32 a_base = hopper::smem_addr(tiles + s * kStageBytes) + half * 64 * 128;
    const u32 b_base = hopper::smem_addr(tiles + s * kStageBytes + kABytes);
    if constexpr (BN == 256) {
      // Two 128-wide halves in turn through one part set: 128 + 64 registers where a 256-wide
      // part would need 128 + 128. The halves' MMAs serialize in this warp group, the other's
      // fill the tensor cores meanwhile. Register h * 64 + i of acc is register i of half h (the
      // m64n256 layout is two m64n128 ones side by side: common/wgmma.cuh), whose columns are
      // one 128-row block of b (ChunkScales' column half h).
      hopper::mbarrier_wait(&full[s], (use / STAGES) & 1);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float part[64];
        mma_stage<128>(part, a_base, b_base + h * 128 * 128);
        wgmma::wait_group<0>();
        wgmma::fence_operands(part);
        if (h == 1 && threadIdx.x % 32 == 0) release_stage(empty, s, pair);
#pragma unroll
        for (int i = 0; i < 64; ++i) {
          acc[h * 64 + i] = fmaf(part[i], c.s[(i / 2) % 2][h], acc[h * 64 + i]);
        }
      }
    } else {
      float part[BN / 2];
      mma_chunk<BN>(part, full, empty, s, (use / STAGES) & 1, a_base, b_base, pair);
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) {
        acc[i] = fmaf(part[i], c.s[(i / 2) % 2][i >= BN / 4], acc[i]);
      }
    }
  }
}

// Consumer `half` (0 or 1): rows 64 * half .. + 63 of the tile into acc, scaled per chunk when
// BLOCK (a 128-wide tile's columns share one scale of b, a 256-wide tile's halves one each); it0
// as consume_fp8_chunks'.
template <int BN, int STAGES, bool BLOCK>
KJIT_DEVICE KJIT_FORCEINLINE void consume_fp8(const GemmFp8Params& p, unsigned char* tiles,
                                              u64* full, u64* empty, int k_blocks, int half,
                                              int m_tile, int n_tile, float (&acc)[BN / 2],
                                              int it0 = 0, bool pair = false) {
  const i64 row0 = fragment_row0(m_tile, half);
  consume_fp8_chunks<BN, STAGES>(
      tiles, full, empty, k_blocks, half, acc,
      [&](int kb) {
        if constexpr (BLOCK) {
          // A 256-wide tile's column halves are two 128-row blocks of b.
          const i64 col = i64(n_tile) * BN;
          const float sb = scale_b_at(p, col, kb);
          return block_scales(p, row0, kb, sb, BN == 256 ? scale_b_at(p, col + 128, kb) : sb);
        } else {
          return ChunkScales{{{1.0f, 1.0f}, {1.0f, 1.0f}}};
        }
      },
      it0, pair);
  if constexpr (!BLOCK) {
    // Per tensor / per row, once: registers 4j .. 4j+3 hold columns 8j + 2 (t % 4) + {0, 1} of
    // rows row0 and row0 + 8 (common/wgmma.cuh). One scale of b per 128 rows never applies here.
    const float sa0 = scale_a_at(p, row0, 0);
    const float sa1 = scale_a_at(p, row0 + 8, 0);
    const i64 col0 = i64(n_tile) * BN + (threadIdx.x % 4) * 2;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const i64 col = col0 + 8 * j;
      const float sb0 = p.scale_b[(col < p.g.n ? col : p.g.n - 1) * p.sb_row];
      const float sb1 = p.scale_b[(col + 1 < p.g.n ? col + 1 : p.g.n - 1) * p.sb_row];
      acc[4 * j] *= sa0 * sb0;
      acc[4 * j + 1] *= sa0 * sb1;
      acc[4 * j + 2] *= sa1 * sb0;
      acc[4 * j + 3] *= sa1 * sb1;
    }
  }
}

// BN 192 (per tensor / per row): a stage moves 40 KB from L2 for 128 x 192 x 128 MACs where the
// 128-wide tile moves 32 KB for 128 x 128 x 128, 17% fewer bytes a FLOP; its sum and the chunk's
// part take 2 x 96 of a consumer's 232 registers. 7-13% faster per FLOP on an H100 at 4096 x 28672
// x 4096 and 8192^3 (select_gemm_fp8 takes it there: gemm_fp8_wide_tile).
// TMA_OUT: the bf16 kernel's TMA-store epilogue (gemm_sm90.cuh, write_tile_tma).
template <typename OUT, int BN, int STAGES, bool BLOCK, bool TMA_OUT = false>
__global__ void __launch_bounds__(kGemmSm90Threads, 1)
    gemm_fp8_sm90_kernel(const __grid_constant__ GemmFp8Params p) {
  // Block scales need each 128-column half of a tile in one 128-row block of b (a 192-wide tile
  // straddles two); the 256-wide tile promotes its halves in turn (consume_fp8_chunks).
  static_assert(BN == 128 || BN == 256 || (BN == 192 && !BLOCK),
                "the fp8 kernel's tile is 128 or 256 wide, or 192 without block scales");
  extern __shared__ unsigned char smem_raw[];
  // The bf16 kernel's layout (ring_in).
  const Ring r = ring_in<STAGES>(smem_raw, (kGemmBlockM + BN) * kFp8ChunkK,
                                 TMA_OUT ? kGemmOutStagingBytes : 0);
  unsigned char* tiles = r.tiles;
  u64* full = r.full;
  u64* empty = r.empty;
  init_ring<STAGES>(full, empty);
  __syncthreads();
  const int k_blocks = static_cast<int>((p.g.k + kFp8ChunkK - 1) / kFp8ChunkK);
  int m_tile, n_tile;
  tile_of<BN>(p.g, m_tile, n_tile);
  const int wg = static_cast<int>(threadIdx.x / 128);
  if (wg == 0) {
    hopper::regs_dealloc<kProducerRegs>();
    // The bf16 kernel's producer, moving e4m3 pairs as 16-bit elements.
    if (threadIdx.x == 0) {
      produce<u16, BN, STAGES>(p.g, tiles, full, empty, k_blocks, m_tile, n_tile);
    }
  } else {
    hopper::regs_alloc<kConsumerRegs>();
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    consume_fp8<BN, STAGES, BLOCK>(p, tiles, full, empty, k_blocks, wg - 1, m_tile, n_tile, acc);
    // No bias: the epilogue's input type only types the (null) bias.
    write_tile_any<__nv_bfloat16, OUT, BN, TMA_OUT>(p.g, wg - 1, m_tile, n_tile, acc, r.extra,
                                                    true);
  }
}

// The persistent form (gemm_sm90.cuh's gemm_sm90_persistent_kernel: a fixed grid, each block
// over for_each_tile's tiles, the ring's stages and phases running on across them, so the next
// tile's first chunks load during this tile's epilogue). Every chunk's MMAs are already waited
// for before its stage is released, so the consumers need only the running stage count. PAIR:
// the bf16 kernel's pairs (clusters of two blocks on adjacent row tiles, b loaded once for both;
// for_each_pair_tile, produce_pair_rows), launched as its are.
template <typename OUT, int BN, int STAGES, bool BLOCK, bool TMA_OUT = false, bool PAIR = false>
__global__ void __launch_bounds__(kGemmSm90Threads, 1)
    gemm_fp8_sm90_persistent_kernel(const __grid_constant__ GemmFp8Params p) {
  static_assert(BN == 128 || BN == 256 || (BN == 192 && !BLOCK),
                "the persistent fp8 kernel's tile is 128 or 256 wide, or 192 without block scales");
  extern __shared__ unsigned char smem_raw[];
  const Ring r = ring_in<STAGES>(smem_raw, (kGemmBlockM + BN) * kFp8ChunkK,
                                 TMA_OUT ? kGemmOutStagingBytes : 0);
  init_ring_published<STAGES, PAIR>(r.full, r.empty);
  const int k_blocks = static_cast<int>((p.g.k + kFp8ChunkK - 1) / kFp8ChunkK);
  const auto walk = [&](auto f) {
    if constexpr (PAIR) {
      for_each_pair_tile<BN, STAGES>(p.g, k_blocks, f);
    } else {
      for_each_tile<BN, STAGES>(p.g, k_blocks, f);
    }
  };
  const int wg = static_cast<int>(threadIdx.x / 128);
  if (wg == 0) {
    hopper::regs_dealloc<kProducerRegs>();
    if (!PAIR && threadIdx.x != 0) return;
    if (threadIdx.x == 0) {
      walk([&](int m_tile, int n_tile, int it0, bool) {
        if constexpr (PAIR) {
          produce_pair_rows<u16, BN, STAGES>(p.g, r.tiles, r.full, r.empty, k_blocks,
                                             m_tile * kGemmBlockM, n_tile * BN, it0,
                                             cluster_rank());
        } else {
          produce_rows<u16, BN, STAGES>(p.g, r.tiles, r.full, r.empty, k_blocks,
                                        m_tile * kGemmBlockM, n_tile * BN, -1, it0);
        }
      });
    }
  } else {
    hopper::regs_alloc<kConsumerRegs>();
    walk([&](int m_tile, int n_tile, int it0, bool more) {
      float acc[BN / 2];
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
      consume_fp8<BN, STAGES, BLOCK>(p, r.tiles, r.full, r.empty, k_blocks, wg - 1, m_tile, n_tile,
                                     acc, it0, PAIR);
      write_tile_any<__nv_bfloat16, OUT, BN, TMA_OUT>(p.g, wg - 1, m_tile, n_tile, acc, r.extra,
                                                      !more);
    });
  }
  leave_pair<PAIR>();
}

}  // namespace gemm
}  // namespace kjit
