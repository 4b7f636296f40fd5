// fp64 CPU references for the normalization family.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

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

}  // namespace kjit::ref
