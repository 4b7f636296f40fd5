// See moe_checks.hpp.
#include "ops/moe/moe_checks.hpp"

#include <algorithm>
#include <iterator>
#include <string>

#include "ops/gemm/gemm.hpp"
#include "util/error.hpp"

namespace kjit::ops::moe_detail {

// `t` as a compact [rows, cols] (ndim 2) or [cols] (ndim 1, rows -1) matrix of `dtype`.
RowMatrix compact(const DLTensor* t, const char* name, DType dtype, int64_t rows, int64_t cols) {
  const RowMatrix m = as_row_matrix(t, name);
  const int ndim = rows < 0 ? 1 : 2;
  if (t->ndim != ndim || (rows >= 0 && t->shape[0] != rows) || t->shape[ndim - 1] != cols) {
    if (rows < 0) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be [{}]", name, cols);
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be [{}, {}]", name, rows, cols);
  }
  if (m.dtype != dtype) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be {}, not {}", name, dtype_name(dtype),
         dtype_name(m.dtype));
  }
  if (m.rows > 1 && m.row_stride != m.cols) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be compact (row stride {}, {} columns)", name,
         m.row_stride, m.cols);
  }
  return m;
}

// `t` as a compact int32 [tokens, top_k] (top_k from its shape, read once `t` is known valid).
std::pair<RowMatrix, int64_t> per_slot_ids(const DLTensor* t, const char* name, int64_t tokens) {
  as_row_matrix(t, name);
  if (t->ndim != 2) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be [tokens, top_k]", name);
  const int64_t top_k = t->shape[1];
  return {compact(t, name, DType::kI32, tokens, top_k), top_k};
}

void check_shape(const DLTensor* t, const char* name, std::initializer_list<int64_t> shape,
                 const char* what) {
  const bool ok =
      t->ndim == static_cast<int>(shape.size()) && std::equal(shape.begin(), shape.end(), t->shape);
  if (!ok) {
    std::string have, want;
    for (int i = 0; i < t->ndim; ++i) have += (i ? ", " : "") + std::to_string(t->shape[i]);
    for (const int64_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is [{}] but must be {} = [{}]", name, have, what, want);
  }
}

RowMatrix matrix_2d(const DLTensor* t, const char* name) {
  const RowMatrix m = as_row_matrix(t, name);
  if (t->ndim != 2) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be 2-D, has ndim {}", name, t->ndim);
  return m;
}

// Rejects any two of `views` sharing a byte (outputs among themselves and with the inputs).
void check_disjoint(std::initializer_list<std::pair<const RowMatrix*, const char*>> views) {
  for (auto i = views.begin(); i != views.end(); ++i) {
    for (auto j = std::next(i); j != views.end(); ++j) {
      if (i->first != nullptr && j->first != nullptr && overlaps(*i->first, *j->first)) {
        fail(KJIT_ERROR_INVALID_ARGUMENT, "{} overlaps {}", i->second, j->second);
      }
    }
  }
}

// Elements per access: the widest power of two up to 16 bytes that the rows' alignment allows
// and that divides the row.
int vector_width(DType dtype, int alignment, int64_t hidden) {
  int vec = std::max(1, alignment / static_cast<int>(dtype_size(dtype)));
  while (vec > 1 && hidden % vec != 0) vec /= 2;
  return vec;
}

}  // namespace kjit::ops::moe_detail
