// The C layout of a division by a launch-wide constant (kernels/common/fastdiv.cuh divides with
// it, src/ops/fastdiv.hpp makes it): one definition that NVRTC and the host compiler both include,
// so a kernel's parameters can hold one. Plain C types only (see kernels/norm/norm_params.h).
#pragma once

namespace kjit {

// n / d == (umulhi(n, mul) + n) >> shift for the divisor d it was made for (fastdiv.cuh).
struct FastDiv {
  unsigned int mul;
  unsigned int shift;
};

}  // namespace kjit
