// Division by a run-time divisor that is the same for the whole launch, without the ~20
// instructions (and their serial latency) of an integer division: the host computes a
// multiplier and a shift once (src/ops/fastdiv.hpp, make_fast_div), and the kernel takes
//
//   n / d == (umulhi(n, mul) + n) >> shift     for every 0 <= n < 2^31
//
// with shift = ceil(log2(d)) and mul = ceil(2^(32 + shift) / d) - 2^32 (Granlund and
// Montgomery's round-up method; the implicit 2^32 of the multiplier is the "+ n"). d == 1 and
// powers of two give mul == 0: a plain shift.
#pragma once

#include "common/fastdiv_params.h"
#include "common/prelude.cuh"

namespace kjit {

// n / d for 0 <= n < 2^31, d the divisor fd was made for.
KJIT_DEVICE KJIT_FORCEINLINE int fast_div(int n, FastDiv fd) {
  const unsigned int u = static_cast<unsigned int>(n);
  return static_cast<int>((__umulhi(u, fd.mul) + u) >> fd.shift);
}

}  // namespace kjit
