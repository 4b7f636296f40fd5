// What the MoE GPU tests share (moe_gpu_test.cpp, moe_fp8_gpu_test.cpp).
#pragma once

#include <random>
#include <vector>

namespace kjit::test {

// Rows per expert: `experts` experts over `rows` rows, with experts of 0 and 1 rows and the rest
// random.
inline std::vector<int> uneven_counts(int experts, int rows, std::mt19937_64& rng) {
  std::vector<int> counts(experts, 0);
  counts[1 % experts] = 1;
  std::uniform_int_distribution<int> pick(2, experts - 1);
  for (int r = 1; r < rows; ++r) ++counts[experts > 2 ? pick(rng) : 0];
  return counts;
}

}  // namespace kjit::test
