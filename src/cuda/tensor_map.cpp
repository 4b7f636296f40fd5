#include "cuda/tensor_map.hpp"

#include <fmt/format.h>

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

TensorMapNd as_nd(const TensorMap2d& t) {
  TensorMapNd n;
  n.ptr = t.ptr;
  n.elem_bytes = t.elem_bytes;
  n.rank = 2;
  n.dims[0] = t.cols;
  n.dims[1] = t.rows;
  n.strides_bytes[0] = t.row_stride_bytes;
  n.box[0] = t.box_cols;
  n.box[1] = t.box_rows;
  n.swizzle = t.swizzle;
  return n;
}

}  // namespace

std::string tensor_map_problem(const TensorMapNd& t) {
  const auto addr = reinterpret_cast<uintptr_t>(t.ptr);
  if (t.elem_bytes != 1 && t.elem_bytes != 2 && t.elem_bytes != 4) {
    return fmt::format("element size {} (TMA maps 1, 2 or 4 bytes here)", t.elem_bytes);
  }
  if (t.rank < 2 || t.rank > 5) return fmt::format("rank {} (2..5 here)", t.rank);
  if (addr == 0 || addr % 16 != 0) {
    return fmt::format("base address {:#x} is not 16-byte aligned", addr);
  }
  for (int i = 0; i < t.rank; ++i) {
    if (t.dims[i] < 1 || t.dims[i] > (uint64_t{1} << 32)) {
      return fmt::format("dimension {} has {} elements (1..2^32)", i, t.dims[i]);
    }
    if (t.box[i] < 1 || t.box[i] > 256) {
      return fmt::format("box side {} of dimension {} (sides 1..256)", t.box[i], i);
    }
  }
  for (int i = 1; i < t.rank; ++i) {
    const uint64_t s = t.strides_bytes[i - 1];
    if (s % 16 != 0 || s >= (uint64_t{1} << 40)) {
      return fmt::format("stride {} bytes of dimension {} is not a multiple of 16 below 2^40", s,
                         i);
    }
  }
  if (t.rank == 2 && t.dims[1] > 1 && t.strides_bytes[0] < t.dims[0] * t.elem_bytes) {
    return fmt::format("row stride {} bytes is shorter than a row ({})", t.strides_bytes[0],
                       t.dims[0] * t.elem_bytes);
  }
  const uint64_t box_row_bytes = uint64_t{t.box[0]} * t.elem_bytes;
  if (box_row_bytes % 16 != 0) {
    return fmt::format("box {} x {}: its rows of {} bytes are not a multiple of 16", t.box[1],
                       t.box[0], box_row_bytes);
  }
  const uint32_t span = swizzle_span_bytes(t.swizzle);
  if (span != 0 && box_row_bytes > span) {
    return fmt::format("a box row of {} bytes exceeds the {}-byte swizzle", box_row_bytes, span);
  }
  return {};
}

void check_tensor_map_2d(const TensorMap2d& t) {
  const std::string problem = tensor_map_problem(as_nd(t));
  if (!problem.empty()) fail(KJIT_ERROR_INVALID_ARGUMENT, "tensor map: {}", problem);
}

CUtensorMap make_tensor_map(const TensorMapNd& t) {
  const std::string problem = tensor_map_problem(t);
  if (!problem.empty()) fail(KJIT_ERROR_INVALID_ARGUMENT, "tensor map: {}", problem);
  const CUtensorMapDataType type = t.elem_bytes == 1   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : t.elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                                       : CU_TENSOR_MAP_DATA_TYPE_UINT32;
  // Innermost dimension first; the stride array omits the innermost (contiguous) one.
  cuuint64_t dims[5] = {}, strides[4] = {};
  cuuint32_t box[5] = {}, elem_strides[5] = {};
  for (int i = 0; i < t.rank; ++i) {
    dims[i] = t.dims[i];
    box[i] = t.box[i];
    elem_strides[i] = 1;
    if (i > 0) strides[i - 1] = t.strides_bytes[i - 1];
  }
  CUtensorMap map{};
  KJIT_CU_CHECK(driver().cuTensorMapEncodeTiled(
      &map, type, static_cast<cuuint32_t>(t.rank), const_cast<void*>(t.ptr), dims, strides, box,
      elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, t.swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return map;
}

CUtensorMap make_tensor_map_2d(const TensorMap2d& t) {
  return make_tensor_map(as_nd(t));
}

}  // namespace kjit::cuda
