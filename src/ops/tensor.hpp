// DLTensor validation shared by every op. Checks are pure (no driver call), so bad input is
// rejected the same way on a machine without a GPU, before anything is compiled or launched.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "ops/dtype.hpp"

namespace kjit::ops {

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

// ---- Strided views: n-d views whose strides are free (RoPE's and paged KV's [tokens, heads, dim]
// tensors, attention states) ---------------------------------------------------------------------

// A tensor with its shape and element strides as given (compact when DLPack's strides is NULL).
struct StridedView {
  char* data = nullptr;  // data + byte_offset
  DType dtype = DType::kF32;
  int device = 0;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // elements
  int64_t numel() const;
  size_t elem_bytes() const { return dtype_size(dtype); }
};

// Checks what as_row_matrix checks, except that any non-negative strides are accepted: NULL,
// ndim, shape, lanes, dtype, device, data, a last dim with a stride other than 1, negative
// strides, a data pointer not aligned to its element size, and an extent that overflows.
// Throws KJIT_ERROR_INVALID_ARGUMENT naming `name`.
StridedView as_strided_view(const DLTensor* t, const char* name);

// True when two distinct indices of `v` address one element (it must not be written then).
bool self_overlaps(const StridedView& v);
// The same elements in the same order (the in-place case).
bool same_view(const StridedView& a, const StridedView& b);
// True when the views may share a byte. Exact for disjoint address ranges and for views whose
// outermost dims have one stride and whose rows fall in disjoint slices of it (q and k of a
// fused qkv, k and v of a [pages, 2, ...] cache); conservatively true otherwise.
bool views_overlap(const StridedView& a, const StridedView& b);
// The widest power of two (<= 16) dividing the address and the byte stride of every dim but the
// last one that has more than one element.
int view_alignment(const StridedView& v);
// Throws KJIT_ERROR_INVALID_ARGUMENT unless b has a's dtype and device (messages name both).
void check_same_dtype_device(const StridedView& a, const char* an, const StridedView& b,
                             const char* bn);

}  // namespace kjit::ops
