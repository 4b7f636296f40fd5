// fp64 CPU reference for the GEMM family: the textbook triple loop over the (already rounded)
// input values, and the error bound a fp32-accumulated result is held to.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "reference/half.hpp"

namespace kjit::ref {

// One output of out = alpha * a . b^T + beta * old + bias, in double. a_row and b_row point at
// k values each. `sum_abs` receives the sum of the magnitudes of the terms (the scale the
// rounding errors of a fp32 accumulation grow with).
inline double gemm_element(const double* a_row, const double* b_row, int64_t k, double alpha,
                           double beta, double old, double bias, double* sum_abs) {
  double acc = 0.0, mag = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    acc += a_row[i] * b_row[i];
    mag += std::fabs(a_row[i] * b_row[i]);
  }
  const double beta_term = beta != 0.0 ? beta * old : 0.0;
  *sum_abs = std::fabs(alpha) * mag + std::fabs(beta_term) + std::fabs(bias);
  return alpha * acc + beta_term + bias;
}

// |got - want| allowed: one rounding to the out dtype, plus the fp32 accumulation's rounding
// errors, which for k terms in any summation order (tensor-core partial sums included) stay near
// sqrt(k) unit roundoffs of the magnitude sum on random data. The factor 2^-20 (16 fp32 unit
// roundoffs per sqrt(k)) leaves room for an accumulator that truncates, yet a dropped 64-wide K
// block or a wrong element is orders of magnitude past it.
inline double gemm_tolerance(const std::string& out_dtype, double want, double sum_abs, int64_t k) {
  return unit_roundoff(out_dtype) * std::fabs(want) +
         0x1p-20 * std::sqrt(static_cast<double>(k) + 1.0) * sum_abs;
}

// |got - want| allowed for an fp8 GEMM, whose reference takes the dequantized operands (e4m3
// value times scale) in fp64: one rounding to the out dtype, plus the accumulation's error, held
// to 2^-12 of the magnitude sum. The tensor cores add fp8 products with fewer bits than fp32
// (DeepSeek-V3 measured about 14 on H800): within one 128-wide K chunk that stays under it, and
// kjit adds the chunks in fp32; summed over all of K in the tensor cores (no promotion) it broke
// this bound by 2x at k = 2048 - 8192 on an H200. A wrong scale (the tests make block scales
// differ by 2^10) or a wrong element is far past it.
inline double gemm_fp8_tolerance(const std::string& out_dtype, double want, double sum_abs) {
  return unit_roundoff(out_dtype) * std::fabs(want) + 0x1p-12 * sum_abs;
}

}  // namespace kjit::ref
