// The GEMM target of an H200 (compute capability 9.0, 132 SMs, 227 KB of opt-in shared memory per
// block, operands TMA can describe) for host-only tests of the sm90 path choices: what
// ops::gemm_target would report on the device the kernels are tuned for.
#pragma once

#include "ops/gemm/gemm.hpp"

namespace kjit::test {

inline ops::GemmTarget h200_gemm_target() {
  ops::GemmTarget t;
  t.cc_major = 9;
  t.max_smem_optin = 232448;
  t.sm_count = 132;
  t.tma_ok = true;
  t.cp_async_ok = true;
  return t;
}

}  // namespace kjit::test
