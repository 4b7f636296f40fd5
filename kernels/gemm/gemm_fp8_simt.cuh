// The fp8 GEMM without tensor cores: every call the sm90 kernel cannot take (sm_80, devices other
// than sm_90, operands TMA cannot describe). The bf16 fallback's tiles (gemm_simt.cuh) over e4m3
// decoded in software, one 128-wide K chunk at a time: each chunk's sum is added to the result
// times its scale (kernels/gemm/gemm_fp8_params.h), which covers every scale mode with one code
// path. Any k; only element alignment is required.
//
// Launch contract: grid (ceil(n / 64), ceil(m / 64)), kGemmSimtThreads threads, no dynamic shared
// memory. out must not overlap a, b or the scales.
#pragma once

#include "common/fp8.cuh"
#include "gemm/fp8_scales.cuh"
#include "gemm/gemm_simt.cuh"

namespace kjit {
namespace gemm {

template <typename OUT>
__global__ void __launch_bounds__(kGemmSimtThreads)
    gemm_fp8_simt_kernel(const __grid_constant__ GemmFp8Params p) {
  const i64 m0 = i64(blockIdx.y) * kGemmSimtTile;
  const i64 n0 = i64(blockIdx.x) * kGemmSimtTile;
  const int tx = static_cast<int>(threadIdx.x % 16);
  const int ty = static_cast<int>(threadIdx.x / 16);
  float acc[4][4] = {};
  for (i64 k0 = 0, c = 0; k0 < p.g.k; k0 += kFp8ChunkK, ++c) {
    float part[4][4] = {};
    simt_accumulate<E4M3>(p.g, m0, n0, k0, k0 + kFp8ChunkK < p.g.k ? k0 + kFp8ChunkK : p.g.k, part);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float sa = scale_a_at(p, m0 + ty + 16 * i, c);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        acc[i][j] = fmaf(part[i][j], sa * scale_b_at(p, n0 + tx + 16 * j, c), acc[i][j]);
      }
    }
  }
  simt_store<__nv_bfloat16, OUT>(p.g, m0, n0, acc);
}

}  // namespace gemm
}  // namespace kjit
