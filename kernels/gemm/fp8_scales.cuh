// The scales of an fp8 GEMM output (kernels/gemm/gemm_fp8_params.h), for both fp8 kernels.
#pragma once

#include "common/prelude.cuh"
#include "gemm/gemm_fp8_params.h"

namespace kjit {
namespace gemm {

// scale_a of row `row` and K chunk `chunk`, scale_b of column `col`. Rows and columns past the
// edges (computed but never stored) read the last one's.
KJIT_DEVICE KJIT_FORCEINLINE float scale_a_at(const GemmFp8Params& p, i64 row, i64 chunk) {
  return p.scale_a[(row < p.g.m ? row : p.g.m - 1) * p.sa_row + chunk * p.sa_chunk];
}
KJIT_DEVICE KJIT_FORCEINLINE float scale_b_at(const GemmFp8Params& p, i64 col, i64 chunk) {
  return p.scale_b[((col < p.g.n ? col : p.g.n - 1) / p.sb_rows) * p.sb_row + chunk * p.sb_chunk];
}

}  // namespace gemm
}  // namespace kjit
