// fp64 CPU references for the normalization family.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "reference/half.hpp"

namespace kjit::ref {

// y[r][i] = x[r][i] / sqrt(mean_i x[r][i]^2 + eps) * (w[i] + weight_offset), in double.
inline std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<double>& w,
                                   int64_t rows, int64_t hidden, double eps,
                                   double weight_offset = 0.0) {
  std::vector<double> y(static_cast<size_t>(rows * hidden));
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * hidden;
    double ss = 0;
    for (int64_t i = 0; i < hidden; ++i) ss += xr[i] * xr[i];
    double inv = 1.0 / std::sqrt(ss / static_cast<double>(hidden) + eps);
    for (int64_t i = 0; i < hidden; ++i) {
      y[static_cast<size_t>(r * hidden + i)] =
          xr[i] * inv * (w[static_cast<size_t>(i)] + weight_offset);
    }
  }
  return y;
}

// The new residual of a fused residual add: x + r added in fp32 (both are values of `dtype`),
// then rounded to `dtype`, element by element. The engines' contract, so the GPU must match it
// exactly.
inline std::vector<double> residual_add(const std::vector<double>& x, const std::vector<double>& r,
                                        const std::string& dtype) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float s = static_cast<float>(x[i]) + static_cast<float>(r[i]);
    unsigned char buf[4];
    store_elem(buf, 0, s, dtype);
    out[i] = load_elem(buf, 0, dtype);
  }
  return out;
}

// y[r][i] = (x[r][i] - mean) / sqrt(var + eps) * gamma[i] + beta[i], biased variance, two-pass
// in double. When given, row_mean / row_rstd receive each row's mean and 1 / sqrt(var + eps).
inline std::vector<double> layernorm(const std::vector<double>& x, const std::vector<double>& gamma,
                                     const std::vector<double>& beta, int64_t rows, int64_t hidden,
                                     double eps, std::vector<double>* row_mean = nullptr,
                                     std::vector<double>* row_rstd = nullptr) {
  std::vector<double> y(static_cast<size_t>(rows * hidden));
  if (row_mean) row_mean->assign(static_cast<size_t>(rows), 0.0);
  if (row_rstd) row_rstd->assign(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * hidden;
    double sum = 0;
    for (int64_t i = 0; i < hidden; ++i) sum += xr[i];
    const double mean = sum / static_cast<double>(hidden);
    double ss = 0;
    for (int64_t i = 0; i < hidden; ++i) ss += (xr[i] - mean) * (xr[i] - mean);
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(hidden) + eps);
    for (int64_t i = 0; i < hidden; ++i) {
      y[static_cast<size_t>(r * hidden + i)] =
          (xr[i] - mean) * rstd * gamma[static_cast<size_t>(i)] + beta[static_cast<size_t>(i)];
    }
    if (row_mean) (*row_mean)[static_cast<size_t>(r)] = mean;
    if (row_rstd) (*row_rstd)[static_cast<size_t>(r)] = rstd;
  }
  return y;
}

// Allowed |got - want| for an output rounded once to `dtype` from an fp32 computation that is
// exact up to a few fp32 ulps per term: half an output ulp (u |want|), plus fp32 slack well above
// a row reduction's worst case (hidden 65537: about 1e-6 relative) and far below any 16-bit
// output ulp. Twice u would let through a kernel that rounds an intermediate to the output type
// (the Gemma weight + 1, or the norm of an unrounded residual).
inline double one_rounding_tolerance(const std::string& dtype, double want) {
  return (unit_roundoff(dtype) + 2e-5) * std::fabs(want) + 1e-6;
}

// LayerNorm on top of one rounding: the fp32 mean is off by a few fp32 ulps of the row's
// magnitude and rstd by a few of its own, and (x - mean) * rstd carries both times |gamma|,
// which beta can cancel in the output. That is the error of a sound two-pass variance (even
// summing 65537 elements in plain sequence stays below 3e-5); the one-pass E[x^2] - mean^2 loses
// ~ (mean / std)^2 fp32 ulps of the variance instead, which rows with a large common offset turn
// into a failure.
inline double layernorm_tolerance(const std::string& dtype, double want, double x, double mean,
                                  double rstd, double gamma) {
  return one_rounding_tolerance(dtype, want) +
         3e-5 * (std::fabs(x) + std::fabs(mean)) * rstd * std::fabs(gamma);
}

}  // namespace kjit::ref
