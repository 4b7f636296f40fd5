// Argument checks shared by the sampling family's ops (sampling_ops.cpp, speculative.cpp): the
// [batch, vocab] matrices and the per-row vectors (indices, parameters, seeds, flags) they take,
// with messages that name the argument.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/tensor.hpp"

namespace kjit::ops::sampling_args {

// A [batch, vocab] matrix. batch and vocab come from the shape (as_row_matrix reports no rows
// for an empty vocabulary).
struct Batch {
  const char* name = nullptr;  // the argument, for the messages of the tensors checked against it
  RowMatrix m;
  int64_t batch = 0;
  int64_t vocab = 0;
};
Batch as_batch(const DLTensor* t, const char* name);
// Whether the rows (and out's, when given) take 16-byte vectors: the vocabulary a multiple of
// the vector and every row 16-byte aligned.
bool vec_ok(const Batch& b, const RowMatrix* out = nullptr);

// A 1-D device tensor of a few accepted element types.
struct Vector {
  const char* name = nullptr;
  char* data = nullptr;
  int64_t n = 0;
  size_t elem = 0;
  DLDataType dtype{};
  int device = 0;
};

// DLPack >= 0.8 names this kDLBool; the header here may predate it.
constexpr uint8_t kBoolCode = 6;

bool is_type(DLDataType t, uint8_t code, uint8_t bits);
std::string type_text(DLDataType t);

// Checks everything but the element type: NULL, ndim 1, shape, device, data, contiguity, a
// byte_offset that wraps the address space and alignment to the element size.
Vector as_vector(const DLTensor* t, const char* name);
void check_length(const Vector& v, int64_t batch, bool one_ok);
void check_device(const Vector& v, const Batch& b);
// Per-row index output: int32 or int64 [batch].
Vector index_vector(const DLTensor* t, const char* name, const Batch& b);
Vector float_row_param(const DLTensor* t, const char* name, const Batch& b);
// seed / offset: int64 or uint64 (read as 64 bits), one value or one per row.
Vector rng_vector(const DLTensor* t, const char* name, const Batch& b);
Vector valid_vector(const DLTensor* t, const Batch& b);

struct Span {
  const char* name;
  uintptr_t lo, hi;
};
Span span_of(const Vector& v);
Span span_of(const RowMatrix& m, const char* name);
// Each written span must share no byte with any other span (read or written).
void check_no_overlap(const std::vector<Span>& written, const std::vector<Span>& all);

}  // namespace kjit::ops::sampling_args
