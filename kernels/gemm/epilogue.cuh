// The output step both GEMM kernels share: one accumulator to one element of out.
#pragma once

#include "common/prelude.cuh"
#include "gemm/gemm_params.h"

namespace kjit {
namespace gemm {

// alpha * acc + beta * *o + bias. *o (the old out) is not read when beta is 0, so an
// uninitialized (even NaN) out is fine then.
template <typename OUT>
KJIT_DEVICE KJIT_FORCEINLINE float output_value(const GemmParams& p, float acc, const OUT* o,
                                                float bias) {
  float v = p.alpha * acc;
  if (p.beta != 0.0f) v = fmaf(p.beta, to_float(*o), v);
  return v + bias;
}

template <typename IN>
KJIT_DEVICE KJIT_FORCEINLINE float bias_at(const GemmParams& p, i64 col) {
  return p.bias != nullptr ? to_float(static_cast<const IN*>(p.bias)[col]) : 0.0f;
}

// out[row, col] = output_value(...). The caller masks row < m, col < n.
template <typename IN, typename OUT>
KJIT_DEVICE KJIT_FORCEINLINE void store_output(const GemmParams& p, i64 row, i64 col, float acc) {
  OUT* o = static_cast<OUT*>(p.out) + row * p.out_stride + col;
  *o = from_float<OUT>(output_value(p, acc, o, bias_at<IN>(p, col)));
}

// Two adjacent outputs in one store (o aligned to two elements).
template <typename OUT>
struct alignas(2 * sizeof(OUT)) OutPair {
  OUT x, y;
};

}  // namespace gemm
}  // namespace kjit
