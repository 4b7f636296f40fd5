// fp64 CPU reference for the GEMM family: the textbook triple loop over the (already rounded)
// input values, and the error bounds a fp32-accumulated result and an fp8 one are held to.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "reference/fp8_ref.hpp"
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

// |got - want| allowed for one output of an fp8 GEMM, whose reference takes the dequantized
// operands (e4m3 value times scale) in fp64, derived from how Hopper's fp8 tensor cores add
// (DeepSeek-V3 technical report, section 3.5.2): the 32 products of one k32 step and the running
// accumulator are aligned to the largest exponent among them and only the highest 14 bits of each
// are kept (the rest truncated; read here with the sign as one of the 14, the looser reading), and
// the step's sum goes into an accumulator of 14 significant bits (SageAttention2 measured e8m13,
// truncating). A product of two e4m3 significands has 2 integer bits, so with the step's largest
// exponent sum E_max its top bit is at most E_max + 1; the alignment keeps bits down to
// L = 2^(top - 12), top = max(E_max + 1, the accumulator's top bit), so each product loses less
// than L (nothing when it is a multiple of L), so does the accumulator, and the step's sum loses
// less than 2^-13 of its value. kjit promotes every 128 of K (4 steps) into fp32, so per chunk c,
// in units of its scale s_c:
//
//   err_c <= sum_steps ((inexact products + accumulator) * L  +  2^-13 * |partial sum after|)
//
// plus fp32's own rounding (the fallback's serial sums of up to 128 products, one fma per chunk,
// the scales and the alpha / beta epilogue) and one rounding to the out dtype. The error of such
// an accumulation is set by the step's largest term, not by the magnitude sum, which is why a
// bound of 2^-12 of the magnitude sum failed on an H200 by up to 1.8x on a few outputs. A first
// form of this bound aligned the products only to their own largest exponent: it failed on an
// H100 by 1.06x on one output of 39000 (block scales, k = 272), the rate at which the model with
// the accumulator in the alignment fails it (about 1 in 10^4 outputs at k = 128 .. 528,
// 2026-12-06), while the H100's largest error / bound at k = 272 (0.4 .. 1.06) is that model's, not
// the products-only model's (0.27 .. 0.39). By the same model, summed in the tensor cores over all
// of K instead, all-positive operands at k = 8192 lose far more than this bound: the GPU test's
// promotion case.
//
// a and b point at the output's k codes of a's row and b's row; chunk_scale(c) is the product of
// the scales of K chunk c (the output's one scale product outside block mode); sum_abs and want
// as ref::gemm_element returns them for the dequantized operands, alpha included.
template <class ChunkScale>
double gemm_fp8_error_bound(const uint8_t* a, const uint8_t* b, int64_t k, ChunkScale chunk_scale,
                            double alpha, double want, double sum_abs,
                            const std::string& out_dtype) {
  double mma = 0.0;
  for (int64_t k0 = 0; k0 < k; k0 += 128) {
    double err = 0.0, partial = 0.0;
    for (int64_t g = k0; g < std::min(k0 + 128, k); g += 32) {
      const int64_t end = std::min(g + 32, k);
      int e_max = -12;  // the exponent sum of zero times zero (TMA's fill past k)
      for (int64_t i = g; i < end; ++i) {
        e_max = std::max(e_max, e4m3_exponent(a[i]) + e4m3_exponent(b[i]));
      }
      // The accumulator holds partial within err: its top bit is at most that of the larger.
      const double acc = std::fabs(partial) + err;
      const int top = acc > 0.0 ? std::max(e_max + 1, std::ilogb(acc)) : e_max + 1;
      const double unit = std::ldexp(1.0, top - 12);
      int inexact = acc > 0.0;  // the accumulator's own low bits
      for (int64_t i = g; i < end; ++i) {
        const double p = e4m3_value(a[i]) * e4m3_value(b[i]);  // exact in fp64
        inexact += p / unit != std::trunc(p / unit);           // both exact: unit is 2^n
        partial += p;
      }
      err += inexact * unit;
      err += 0x1p-13 * (std::fabs(partial) + err);
    }
    mma += err * std::fabs(static_cast<double>(chunk_scale(k0 / 128)));
  }
  const double fp32 = static_cast<double>(128 + (k + 127) / 128 + 4) * 0x1p-24 * sum_abs;
  const double acc = std::fabs(alpha) * mma + fp32;
  const double u = unit_roundoff(out_dtype);
  return acc + u * (std::fabs(want) + acc) + underflow_slack(u);
}

}  // namespace kjit::ref
