// DLTensor validation shared by every op. Checks are pure (no driver call), so bad input is
// rejected the same way on a machine without a GPU, before anything is compiled or launched.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace kjit::ops {

enum class DType { kF32, kF16, kBF16, kI32, kI64 };

std::optional<DType> dtype_of(DLDataType t);
const char* dtype_name(DType t);  // "fp32", "fp16", "bf16", "int32", "int64"
size_t dtype_size(DType t);
// The CUDA spelling of a float dtype for generated code ("__nv_bfloat16"); nullptr otherwise.
const char* device_type_name(DType t);
bool is_float(DType t);  // fp32, fp16 or bf16

inline constexpr int kMaxDims = 8;

// data + byte_offset as an address. Throws KJIT_ERROR_INVALID_ARGUMENT naming `name` when the sum
// wraps the address space (to NULL, or past the top): a hostile byte_offset must not turn a valid
// pointer into another one, and pointer arithmetic that overflows is undefined before it could be
// checked. Every check that reads a DLTensor's address goes through this.
uintptr_t data_address(const DLTensor* t, const char* name);

// A tensor seen as a row-major matrix: [..., cols] with unit-stride columns and the leading dims
// collapsed into rows that are row_stride elements apart.
struct RowMatrix {
  void* data = nullptr;  // data + byte_offset
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;  // elements
  DType dtype = DType::kF32;
  int device = 0;
  int64_t numel() const { return rows * cols; }
};

// Throws KJIT_ERROR_INVALID_ARGUMENT naming `name` when `t` is null, has ndim outside 1..8,
// negative or overflowing shapes, lanes != 1, an unknown dtype, a non-CUDA device, a null data
// pointer with elements, a byte_offset that wraps the address space, data (+ byte_offset) not
// aligned to the element size, a last dim that is not contiguous, leading dims that do not
// collapse into one row stride, or rows that overlap.
RowMatrix as_row_matrix(const DLTensor* t, const char* name);

// The widest power-of-two byte alignment (<= 16) shared by the address and the row stride.
int row_alignment(const RowMatrix& m);

// Throws KJIT_ERROR_INVALID_ARGUMENT unless `a` and `b` have `want` dtype and live on one device.
void check_same_dtype(const RowMatrix& a, const char* an, const RowMatrix& b, const char* bn);
void check_same_device(const RowMatrix& a, const char* an, const RowMatrix& b, const char* bn);

// True when the two matrices share any byte without being the same view (aliasing we reject).
bool partially_overlaps(const RowMatrix& a, const RowMatrix& b);

}  // namespace kjit::ops
