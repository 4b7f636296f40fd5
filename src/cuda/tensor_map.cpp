#include "cuda/tensor_map.hpp"

#include "cuda/driver.hpp"
#include "util/error.hpp"

namespace kjit::cuda {

namespace {

uint32_t swizzle_span_bytes(CUtensorMapSwizzle s) {
  switch (s) {
    case CU_TENSOR_MAP_SWIZZLE_32B: return 32;
    case CU_TENSOR_MAP_SWIZZLE_64B: return 64;
    case CU_TENSOR_MAP_SWIZZLE_128B: return 128;
    default: return 0;
  }
}

}  // namespace

void check_tensor_map_2d(const TensorMap2d& t) {
  const auto addr = reinterpret_cast<uintptr_t>(t.ptr);
  if (t.elem_bytes != 1 && t.elem_bytes != 2 && t.elem_bytes != 4) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "tensor map: element size {} (TMA maps 1, 2 or 4 bytes here)",
         t.elem_bytes);
  }
  if (addr == 0 || addr % 16 != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "tensor map: base address {:#x} is not 16-byte aligned",
         addr);
  }
  if (t.rows < 1 || t.cols < 1 || t.rows > (uint64_t{1} << 32) || t.cols > (uint64_t{1} << 32)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "tensor map: {} x {} elements (each side 1..2^32)", t.rows,
         t.cols);
  }
  if (t.row_stride_bytes % 16 != 0 || t.row_stride_bytes >= (uint64_t{1} << 40)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "tensor map: row stride {} bytes is not a multiple of 16 below 2^40", t.row_stride_bytes);
  }
  if (t.rows > 1 && t.row_stride_bytes < t.cols * t.elem_bytes) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "tensor map: row stride {} bytes is shorter than a row ({})",
         t.row_stride_bytes, t.cols * t.elem_bytes);
  }
  const uint64_t box_row_bytes = uint64_t{t.box_cols} * t.elem_bytes;
  if (t.box_rows < 1 || t.box_rows > 256 || t.box_cols < 1 || t.box_cols > 256 ||
      box_row_bytes % 16 != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "tensor map: box {} x {} (sides 1..256, a box row a multiple of 16 bytes)", t.box_rows,
         t.box_cols);
  }
  const uint32_t span = swizzle_span_bytes(t.swizzle);
  if (span != 0 && box_row_bytes > span) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "tensor map: a box row of {} bytes exceeds the {}-byte swizzle", box_row_bytes, span);
  }
}

CUtensorMap make_tensor_map_2d(const TensorMap2d& t) {
  check_tensor_map_2d(t);
  const CUtensorMapDataType type = t.elem_bytes == 1   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : t.elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                                       : CU_TENSOR_MAP_DATA_TYPE_UINT32;
  // Innermost dimension first; the stride array omits the innermost (contiguous) one.
  const cuuint64_t dims[2] = {t.cols, t.rows};
  const cuuint64_t strides[1] = {t.row_stride_bytes};
  const cuuint32_t box[2] = {t.box_cols, t.box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  CUtensorMap map{};
  KJIT_CU_CHECK(driver().cuTensorMapEncodeTiled(
      &map, type, 2, const_cast<void*>(t.ptr), dims, strides, box, elem_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, t.swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return map;
}

}  // namespace kjit::cuda
