// TMA tensor maps (sm_90+): the descriptor a kernel's cp.async.bulk.tensor reads, encoded by the
// driver (cuTensorMapEncodeTiled, loaded with the rest of the driver table).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

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

// A tensor of 2..5 dimensions as TMA sees it, innermost first: dims[0] elements are contiguous,
// dimension i > 0 steps strides_bytes[i - 1] bytes; boxes of box[0] x ... x box[rank - 1]
// elements. Coordinates outside the dims load as zeros (negative ones too).
struct TensorMapNd {
  const void* ptr = nullptr;
  int elem_bytes = 2;
  int rank = 0;
  uint64_t dims[5] = {};
  uint64_t strides_bytes[4] = {};
  uint32_t box[5] = {};
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
};

// The rules of check_tensor_map_2d for every dimension (a stride per outer dimension, a multiple
// of 16 below 2^40; box sides 1..256, the innermost a multiple of 16 bytes within the swizzle
// span); rank 2..5. Pure: no driver call. Returns the first rule broken, or an empty string.
std::string tensor_map_problem(const TensorMapNd& t);

// tensor_map_problem (KJIT_ERROR_INVALID_ARGUMENT when it finds one), then the driver's encoding.
CUtensorMap make_tensor_map(const TensorMapNd& t);

}  // namespace kjit::cuda
