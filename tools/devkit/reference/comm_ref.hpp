// fp64 CPU references for the communication family: what every rank must hold after an
// all-reduce of the ranks' inputs (each input a vector of `dtype` values as doubles).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "reference/half.hpp"
#include "reference/norm_ref.hpp"

namespace kjit::ref {

// The exact sum over ranks, element by element, in double (not rounded to the dtype).
inline std::vector<double> all_reduce_sum(const std::vector<std::vector<double>>& per_rank) {
  std::vector<double> sum(per_rank.empty() ? 0 : per_rank[0].size(), 0.0);
  for (const auto& x : per_rank) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += x[i];
  }
  return sum;
}

// kjit_all_reduce_add_rmsnorm's contract, on [rows, hidden] inputs: a = the sum rounded to the
// dtype (as kjit_all_reduce stores it); new_residual = residual_add(a, residual); out =
// rmsnorm(new_residual) * weight, in double (not rounded).
inline void all_reduce_add_rmsnorm(const std::vector<std::vector<double>>& per_rank,
                                   const std::vector<double>& residual,
                                   const std::vector<double>& weight, int64_t rows, int64_t hidden,
                                   double eps, const std::string& dtype,
                                   std::vector<double>& new_residual, std::vector<double>& out) {
  std::vector<double> a = all_reduce_sum(per_rank);
  for (double& v : a) v = round_elem(v, dtype);
  new_residual = residual_add(a, residual, dtype);
  out = rmsnorm(new_residual, weight, rows, hidden, eps);
}

}  // namespace kjit::ref
