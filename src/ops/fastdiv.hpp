// Host side of kernels/common/fastdiv.cuh: the multiplier and shift that let a kernel divide by a
// run-time divisor with a multiply-high, an add and a shift.
#pragma once

#include <cstdint>

#include "common/fastdiv_params.h"

namespace kjit::ops {

// The device's own struct (kernels/common/fastdiv_params.h).
using FastDiv = kjit::FastDiv;

// For 1 <= d < 2^31: shift = ceil(log2(d)), mul = ceil(2^(32 + shift) / d) - 2^32. Then
// n / d == (umulhi(n, mul) + n) >> shift for every 0 <= n < 2^31: the round-up multiplier's
// error, mul * d - 2^(32 + shift) < d <= 2^shift, cannot reach the next quotient there, and
// n + umulhi(n, mul) < 2^32.
constexpr FastDiv make_fast_div(uint32_t d) {
  uint32_t shift = 0;
  while ((uint64_t{1} << shift) < d) ++shift;
  const uint64_t num = uint64_t{1} << (32 + shift);  // shift <= 31: fits
  const uint64_t m = (num + d - 1) / d;              // in [2^32, 2^33)
  return {static_cast<uint32_t>(m - (uint64_t{1} << 32)), shift};
}

// What the device computes, for tests.
constexpr uint32_t fast_div(uint32_t n, FastDiv fd) {
  const uint32_t hi = static_cast<uint32_t>((uint64_t{n} * fd.mul) >> 32);
  return (hi + n) >> fd.shift;
}

}  // namespace kjit::ops
