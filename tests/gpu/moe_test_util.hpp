// What the MoE GPU tests share (moe_gpu_test.cpp, moe_fp8_gpu_test.cpp).
#pragma once

#include <random>
#include <vector>

#include "ops/moe/moe.hpp"

namespace kjit::test {

// Whether a call's tuning forces anything (a kernel, a split, the persistent form, a width): such
// calls go through the ops layer, which takes the tuning; the C entry points run the defaults.
inline bool forced(const ops::MoeGemmTuning& t) {
  return t.force != ops::MoeGemmForce::kNone || t.split != 0 || t.persistent || t.bn != 0;
}

// Rows per expert for the persistent kernels' tests: `experts` experts over `rows` rows, expert
// `big` taking 90% of them, one expert with none and one with a single row, the rest even.
inline std::vector<int> skewed_counts(int experts, int rows, int big) {
  std::vector<int> counts(experts, 0);
  counts[big] = rows * 9 / 10;
  int left = rows - counts[big] - 1;
  counts[(big + 2) % experts] = 1;
  for (int e = 0; left > 0; e = (e + 1) % experts) {
    if (e == big || e == (big + 1) % experts || e == (big + 2) % experts) continue;
    ++counts[e];
    --left;
  }
  return counts;
}

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
