// The output step the GEMM kernels share: one accumulator to one element of out, and the
// tensor-core accumulator fragment both mma.sync and wgmma hold.
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

// Whether every even column of out is aligned to an OutPair.
template <typename OUT>
KJIT_DEVICE KJIT_FORCEINLINE bool out_pairs_ok(const GemmParams& p) {
  return reinterpret_cast<u64>(p.out) % (2 * sizeof(OUT)) == 0 && p.out_stride % 2 == 0;
}

// One thread's part of a 16 x 8 accumulator tile (mma.sync's m16n8 C fragment; a wgmma
// accumulator holds one per 8 columns): c[0], c[1] at (row, col), (row, col + 1) and c[2], c[3]
// at (row + 8, col ..), col even. Masked at the M and N edges; the two columns go out in one store
// when `pairs` (out_pairs_ok).
template <typename IN, typename OUT>
KJIT_DEVICE KJIT_FORCEINLINE void store_fragment(const GemmParams& p, i64 row, i64 col,
                                                 const float* c, bool pairs) {
  if (col >= p.n) return;
  const bool both = col + 1 < p.n;
  const float bias0 = bias_at<IN>(p, col);
  const float bias1 = both ? bias_at<IN>(p, col + 1) : 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const i64 r = row + 8 * h;
    if (r >= p.m) continue;
    OUT* o = static_cast<OUT*>(p.out) + r * p.out_stride + col;
    const float v0 = output_value(p, c[2 * h], o, bias0);
    if (both) {
      const float v1 = output_value(p, c[2 * h + 1], o + 1, bias1);
      if (pairs) {
        *reinterpret_cast<OutPair<OUT>*>(o) =
            OutPair<OUT>{from_float<OUT>(v0), from_float<OUT>(v1)};
      } else {
        o[0] = from_float<OUT>(v0);
        o[1] = from_float<OUT>(v1);
      }
    } else {
      o[0] = from_float<OUT>(v0);
    }
  }
}

}  // namespace gemm
}  // namespace kjit
