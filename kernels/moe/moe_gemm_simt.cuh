// Grouped GEMM without tensor cores: the fallback of moe_gemm_sm90.cuh (sm_80, operands TMA
// cannot describe). Each block runs gemm_simt.cuh's 64 x 64 tile on its expert's rows
// (moe_schedule.cuh).
//
// Launch contract: grid (ceil(n / 64), p.tiles_m), kGemmSimtThreads threads, no dynamic shared
// memory; p.tiles_m >= the schedule's 64-row tiles (sum over experts of ceil(rows / 64)).
#pragma once

#include "gemm/gemm_simt.cuh"
#include "moe/moe_schedule.cuh"

namespace kjit {
namespace moe {

template <typename IN, typename OUT>
__global__ void __launch_bounds__(gemm::kGemmSimtThreads)
    moe_gemm_simt_kernel(const __grid_constant__ MoeGemmParams p) {
  const GroupTile t = block_tile<gemm::kGemmSimtTile>(p, static_cast<int>(blockIdx.y));
  if (t.expert < 0) return;
  const gemm::GemmParams q = expert_view(p, t, sizeof(IN), sizeof(OUT));
  const i64 n0 = i64(blockIdx.x) * gemm::kGemmSimtTile;
  float acc[4][4] = {};
  gemm::simt_accumulate<IN>(q, 0, n0, 0, q.k, acc);
  gemm::simt_store<IN, OUT>(q, 0, n0, acc);
}

}  // namespace moe
}  // namespace kjit
