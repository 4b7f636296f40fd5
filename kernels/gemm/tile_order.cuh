// The order in which the GEMM kernels' blocks visit their output tiles (gemm_sm90.cuh,
// gemm_mma_sm80.cuh and the grouped GEMM, kernels/moe/): device code with no arch requirement.
#pragma once

#include "common/prelude.cuh"
#include "gemm/gemm_params.h"

namespace kjit {
namespace gemm {

// Block b's tile. Blocks run in index order, so consecutive blocks sweep bands of GROUP row tiles
// down their columns: a wave of blocks then reads a band of a and a few column tiles of b that
// both stay in L2, where a row-major order would stream all of b (larger than L2 for an MLP
// weight) once per row tile. (The grouped GEMM orders its tiles the same way over its own counts;
// its persistent kernels take narrower bands, kMoeGroupM.)
template <int GROUP = kGemmGroupM>
KJIT_DEVICE KJIT_FORCEINLINE void band_tile(int b, int tiles_m, int tiles_n, int& m_tile,
                                            int& n_tile) {
  const int band = b / (GROUP * tiles_n);
  const int first = band * GROUP;
  const int rows = tiles_m - first < GROUP ? tiles_m - first : GROUP;
  const int in_band = b - band * GROUP * tiles_n;
  m_tile = first + in_band % rows;
  n_tile = in_band / rows;
}

}  // namespace gemm
}  // namespace kjit
