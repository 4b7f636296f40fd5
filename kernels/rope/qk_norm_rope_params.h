// Parameters of the fused per-head QK RMSNorm + RoPE kernel (kernels/rope/qk_norm_rope.cuh),
// shared by NVRTC and the host op (src/ops/rope/qk_norm_rope.cpp). The names and namespace are
// part of the kernel's mangled name: keep them.
#pragma once

#include "rope/rope_params.h"

namespace kjit {
namespace rope {

// Passed by value as the kernel's __grid_constant__ argument.
//  - rope: q_in = q_out, k_in = k_out (in place), pos, strides, head counts and the grid, as the
//    RoPE kernels take them (copy_q_pass / copy_k_pass unused).
//  - q_weight, k_weight: [HEAD_DIM] RMSNorm weights in the q / k dtype; eps.
//  - freq: (hi, lo) of inv_freq[f] / pi, f < TABLE = ROT_DIM / 2, as RopeParams.
template <int TABLE>
struct QkNormRopeParams {
  RopeArgs rope;
  const void* q_weight;
  const void* k_weight;
  float eps;
  float freq[2 * TABLE];
};

}  // namespace rope
}  // namespace kjit
