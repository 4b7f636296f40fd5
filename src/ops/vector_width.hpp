// The vector width of the elementwise kernels that move whole rows (gated activations, KV append,
// embedding gather).
#pragma once

#include <cstdint>

#include "ops/dtype.hpp"

namespace kjit::ops {

// The widest vector (elements, at most 16 bytes) that divides a row of `n` elements and that the
// pointers and row strides allow (`align_bytes`, a power of two): odd sizes and misaligned views
// run narrower, down to scalar, rather than fail.
inline int widest_vector(DType dtype, int64_t n, int align_bytes) {
  const int elem = static_cast<int>(dtype_size(dtype));
  int vec = 16 / elem;
  while (vec > 1 && (n % vec != 0 || vec * elem > align_bytes)) vec /= 2;
  return vec;
}

}  // namespace kjit::ops
