// Argument checks the MoE ops share (moe.cpp, moe_forward.cpp): compact int / fp32 tables, 2-D
// row matrices, pairwise disjointness and the row copies' vector width.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "ops/dtype.hpp"
#include "ops/tensor.hpp"

namespace kjit::ops::moe_detail {

// `t` as a compact [rows, cols] (ndim 2) or [cols] (ndim 1, rows -1) matrix of `dtype`.
RowMatrix compact(const DLTensor* t, const char* name, DType dtype, int64_t rows, int64_t cols);

// `t` as a compact int32 [tokens, top_k] (top_k from its shape, read once `t` is known valid).
std::pair<RowMatrix, int64_t> per_slot_ids(const DLTensor* t, const char* name, int64_t tokens);

// Throws KJIT_ERROR_INVALID_ARGUMENT unless `t` has exactly `shape` (what: its formula, for the
// message).
void check_shape(const DLTensor* t, const char* name, std::initializer_list<int64_t> shape,
                 const char* what);

// `t` as a row matrix that must be 2-D.
RowMatrix matrix_2d(const DLTensor* t, const char* name);

// Rejects any two of `views` sharing a byte (null entries are skipped).
void check_disjoint(std::initializer_list<std::pair<const RowMatrix*, const char*>> views);

// Elements per access: the widest power of two up to 16 bytes that the rows' alignment allows
// and that divides the row.
int vector_width(DType dtype, int alignment, int64_t hidden);

}  // namespace kjit::ops::moe_detail
