// GEMM without tensor cores: the path for every call the sm90 kernel cannot take (sm_80, devices
// other than sm_90, operands TMA cannot describe: K not a multiple of 8, strides or bases not
// 16-byte aligned). Same contract as gemm_sm90.cuh (kernels/gemm/gemm_params.h); only element
// alignment is required.
//
// A 64 x 64 block tile over K steps of 16: the block stages a and b through shared memory as fp32
// (zero past the edges), each thread accumulates 4 x 4 outputs in fp32 (rows ty + 16 i, columns
// tx + 16 j, so a warp's shared-memory reads fall in distinct banks).
//
// Launch contract: grid (ceil(n / 64), ceil(m / 64)), kGemmSimtThreads threads, no dynamic shared
// memory. out must not overlap a, b or bias.
#pragma once

#include "common/prelude.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/gemm_params.h"

namespace kjit {
namespace gemm {

// The block's 64 x 64 tile of a[m0.., k_begin..k_end) . b[n0.., k_begin..k_end)^T added to acc
// (thread (tx, ty) holds rows ty + 16 i, columns tx + 16 j). IN is the operands' storage type
// (anything to_float reads: bf16, fp16, E4M3). Every thread of the block calls it.
template <typename IN>
KJIT_DEVICE KJIT_FORCEINLINE void simt_accumulate(const GemmParams& p, i64 m0, i64 n0, i64 k_begin,
                                                  i64 k_end, float (&acc)[4][4]) {
  constexpr int T = kGemmSimtTile;
  constexpr int TK = kGemmSimtTileK;
  __shared__ float as[TK][T + 1];
  __shared__ float bs[TK][T + 1];
  const IN* a = static_cast<const IN*>(p.a);
  const IN* b = static_cast<const IN*>(p.b);
  const int tx = static_cast<int>(threadIdx.x % 16);
  const int ty = static_cast<int>(threadIdx.x / 16);
  for (i64 k0 = k_begin; k0 < k_end; k0 += TK) {
#pragma unroll
    for (int i = 0; i < T * TK / kGemmSimtThreads; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kGemmSimtThreads;
      const int r = e / TK;
      const int c = e % TK;
      const i64 k = k0 + c;
      as[c][r] = m0 + r < p.m && k < k_end ? to_float(a[(m0 + r) * p.a_stride + k]) : 0.0f;
      bs[c][r] = n0 + r < p.n && k < k_end ? to_float(b[(n0 + r) * p.b_stride + k]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < TK; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        av[i] = as[kk][ty + 16 * i];
        bv[i] = bs[kk][tx + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
    }
    __syncthreads();
  }
}

// Stores the thread's 4 x 4 outputs of the tile at (m0, n0) (masked at the edges). IN types the
// bias.
template <typename IN, typename OUT>
KJIT_DEVICE KJIT_FORCEINLINE void simt_store(const GemmParams& p, i64 m0, i64 n0,
                                             const float (&acc)[4][4]) {
  const int tx = static_cast<int>(threadIdx.x % 16);
  const int ty = static_cast<int>(threadIdx.x / 16);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const i64 row = m0 + ty + 16 * i;
      const i64 col = n0 + tx + 16 * j;
      if (row < p.m && col < p.n) store_output<IN, OUT>(p, row, col, acc[i][j]);
    }
  }
}

template <typename IN, typename OUT>
__global__ void __launch_bounds__(kGemmSimtThreads)
    gemm_simt_kernel(const __grid_constant__ GemmParams p) {
  const i64 m0 = i64(blockIdx.y) * kGemmSimtTile;
  const i64 n0 = i64(blockIdx.x) * kGemmSimtTile;
  float acc[4][4] = {};
  simt_accumulate<IN>(p, m0, n0, 0, p.k, acc);
  simt_store<IN, OUT>(p, m0, n0, acc);
}

}  // namespace gemm
}  // namespace kjit
