// TMA tensor maps (sm_90+): the descriptor a kernel's cp.async.bulk.tensor reads, encoded by the
// driver (cuTensorMapEncodeTiled, loaded with the rest of the driver table).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace kjit::cuda {

// A row-major 2-D tensor as TMA sees it: `rows` x `cols` elements of `elem_bytes` (1, 2 or 4),
// rows `row_stride_bytes` apart, copied in boxes of box_rows x box_cols elements. Elements past
// the edges load as zeros.
struct TensorMap2d {
  const void* ptr = nullptr;
  int elem_bytes = 2;
  uint64_t rows = 0, cols = 0;
  uint64_t row_stride_bytes = 0;
  uint32_t box_rows = 0, box_cols = 0;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
};

// Throws KJIT_ERROR_INVALID_ARGUMENT naming the rule that `t` breaks: TMA needs a 16-byte-aligned
// base, a row stride that is a multiple of 16 bytes (and below 2^40), 1..2^32 rows and columns,
// box sides 1..256 with a box row of a multiple of 16 bytes, no wider than the swizzle span (32,
// 64 or 128 bytes). Pure: no driver call.
void check_tensor_map_2d(const TensorMap2d& t);

// check_tensor_map_2d, then the driver's encoding. Throws KJIT_ERROR_NO_DEVICE without a driver
// and KJIT_ERROR_CUDA when the driver refuses it.
CUtensorMap make_tensor_map_2d(const TensorMap2d& t);

}  // namespace kjit::cuda
