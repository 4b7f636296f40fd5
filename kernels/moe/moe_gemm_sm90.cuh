// Grouped GEMM on Hopper tensor cores (sm_90a): gemm_sm90.cuh's pipeline (TMA ring, producer /
// consumer warpgroups, wgmma, epilogue) over a per-expert tile schedule (moe_schedule.cuh).
//
// A block's row tile starts at any row of a (its expert's first row + 128 i), so TMA reads up to
// 127 rows of the next expert with it; b is one 2-D map over [experts * n, k], and a column tile
// at the end of n reads rows of the next expert's weight. Both only add to accumulators the
// epilogue never writes: it masks rows at the expert's end and columns at n.
//
// Launch contract: gemm_sm90.cuh's, with a grid of p.tiles_m * p.tiles_n blocks (p.tiles_m >=
// the schedule's 128-row tiles), p.g.tma_a over a [g.m, k] and p.g.tma_b over b [experts * n, k].
#pragma once

#include "gemm/gemm_sm90.cuh"
#include "moe/moe_schedule.cuh"

namespace kjit {
namespace moe {

template <typename IN, typename OUT, int BN, int STAGES>
__global__ void __launch_bounds__(gemm::kGemmSm90Threads, 1)
    moe_gemm_sm90_kernel(const __grid_constant__ MoeGemmParams p) {
  using namespace gemm;
  constexpr u32 kStageBytes = (kGemmBlockM + BN) * kGemmBlockK * sizeof(IN);
  extern __shared__ unsigned char smem_raw[];
  unsigned char* tiles = smem_raw + ((1024 - (hopper::smem_addr(smem_raw) & 1023)) & 1023);
  u64* full = reinterpret_cast<u64*>(tiles + STAGES * kStageBytes);
  u64* empty = full + STAGES;
  const int k_blocks = static_cast<int>((p.g.k + kGemmBlockK - 1) / kGemmBlockK);
  int m_tile, n_tile;
  band_tile(static_cast<int>(blockIdx.x), p.tiles_m, p.tiles_n, m_tile, n_tile);
  init_ring<STAGES>(full, empty);
  const GroupTile t = block_tile<kGemmBlockM>(p, m_tile);  // its __syncthreads publishes the ring
  if (t.expert < 0) return;
  const int wg = static_cast<int>(threadIdx.x / 128);
  if (wg == 0) {
    hopper::regs_dealloc<kProducerRegs>();
    if (threadIdx.x == 0) {
      produce_rows<IN, BN, STAGES>(p.g, tiles, full, empty, k_blocks, static_cast<int>(t.row0),
                                   static_cast<int>(t.expert * p.g.n) + n_tile * BN);
    }
  } else {
    hopper::regs_alloc<kConsumerRegs>();
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    consume<IN, BN, STAGES>(tiles, full, empty, k_blocks, wg - 1, acc);
    write_tile<IN, OUT, BN>(expert_view(p, t, sizeof(IN), sizeof(OUT)), wg - 1, 0, n_tile, acc);
  }
}

}  // namespace moe
}  // namespace kjit
