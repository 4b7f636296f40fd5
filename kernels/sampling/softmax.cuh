// Softmax with temperature over the last dimension: out = exp((x - max) / T) / sum, fp32 out.
//
// Two reads of the row: an online pass keeps a running maximum and a sum rescaled whenever the
// maximum grows (so no separate max pass), then the write pass. The weights use the same
// exp2-based formula as the samplers (sampling/block.cuh), so softmax followed by a sampler over
// probabilities sees the weights the fused logits sampler would.
#pragma once

#include "common/prelude.cuh"
#include "common/vec.cuh"
#include "sampling/block.cuh"
#include "sampling/sampling_params.h"

namespace kjit {
namespace sampling {

// Launch: grid = rows, block = a multiple of 32 up to 1024, no dynamic shared memory. vocab %
// vec == 0; input rows aligned to vec * sizeof(dtype) bytes and out rows to min(vec, 4) * 4
// bytes. out may be input itself when dtype is float (same strides). A row with a NaN or +Inf
// logit, only -Inf logits, or a temperature that is not finite and > 0 is written as NaN.
// clang-format off
template <typename dtype, int vec, int unroll>
__global__ void __launch_bounds__(1024)
softmax_kernel(const __grid_constant__ SoftmaxParams p) {
  // clang-format on
  const float kInf = __int_as_float(0x7f800000);
  constexpr float kMaxFinite = 3.40282347e38f;
  constexpr int kOutVec = vec < 4 ? vec : 4;
  __shared__ float s_red_f[32];
  __shared__ double s_red_d[32];

  const i64 r = blockIdx.x;
  const int vocab = p.vocab;
  const dtype* row = static_cast<const dtype*>(p.input) + r * p.in_stride;
  float* out = p.out + r * p.out_stride;
  const float t = p.temp_arr == nullptr ? p.temperature : p.temp_arr[r];
  const float c = 1.44269504088896341f / t;
  bool bad = !(t > 0.0f && t <= kMaxFinite && c <= kMaxFinite);

  float m = -kInf, s = 0.0f;
  const RowWalk<dtype, vec, unroll> walk{row, vocab};
  walk.run([&](int, float x) {
    bad |= !(x <= kMaxFinite);  // NaN or +Inf
    if (x > m) {
      s = (m == -kInf ? 0.0f : s * exp_weight(m, x, c)) + 1.0f;
      m = x;
    } else if (x != -kInf) {
      s += exp_weight(x, m, c);
    }
  });
  bad = __syncthreads_or(bad) != 0;
  const float mx = block_max(m, s_red_f);
  const double part = m == -kInf ? 0.0 : double(s) * double(exp_weight(m, mx, c));
  const double total = block_sum<double>(part, s_red_d);
  bad |= !(mx >= -kMaxFinite) || !(total > 0.0);
  const float inv = bad ? __int_as_float(0x7fc00000) : float(1.0 / total);

  constexpr int kSeg = 32 * vec * unroll;
  const int lane = int(threadIdx.x) & 31;
  const int stride = int(blockDim.x) * vec * unroll;
  for (int base = (int(threadIdx.x) >> 5) * kSeg; base < vocab; base += stride) {
    Vec<dtype, vec> v[unroll];
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const int i = base + (u * 32 + lane) * vec;
      if (i < vocab) v[u].load(row + i);
    }
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const int i = base + (u * 32 + lane) * vec;
      if (i < vocab) {
#pragma unroll
        for (int h = 0; h < vec / kOutVec; ++h) {
          Vec<float, kOutVec> o;
#pragma unroll
          for (int e = 0; e < kOutVec; ++e) {
            o[e] = exp_weight(to_float(v[u][h * kOutVec + e]), mx, c) * inv;
          }
          o.store(out + i + h * kOutVec);
        }
      }
    }
  }
}

}  // namespace sampling
}  // namespace kjit
