// Softmax with temperature over the last dimension: out = exp((x - max) / T) / sum, fp32 out.
//
// Two reads of the row: an online pass keeps a running maximum and a sum rescaled whenever the
// maximum grows (so no separate max pass), then the write pass. One block per row, or on sm_90 a
// cluster of blocks per row for small batches (softmax_cluster_kernel). The weights use the same
// exp2-based formula as the samplers (sampling/block.cuh), so softmax followed by a sampler over
// probabilities sees the weights the fused logits sampler would.
#pragma once

#include "common/prelude.cuh"
#include "common/vec.cuh"
#include "common/cluster.cuh"
#include "sampling/block.cuh"
#include "sampling/sampling_params.h"

namespace kjit {
namespace sampling {

namespace detail {

// One row (or one part of it): the maximum mx of its logits, the sum of exp_weight(x, mx, c)
// over them in fp64, and whether it holds a NaN or +Inf. An online pass keeps a running maximum
// and a sum rescaled whenever the maximum grows. -Inf logits weigh nothing; a row of them has
// mx = -Inf and total 0.
struct RowStats {
  float mx;
  double total;
  bool bad;
};

template <typename dtype, int vec, int unroll>
KJIT_DEVICE RowStats row_stats(const dtype* row, int n, float c, float* s_red_f, double* s_red_d) {
  const float kInf = __int_as_float(0x7f800000);
  constexpr float kMaxFinite = 3.40282347e38f;
  bool bad = false;
  float m = -kInf, s = 0.0f;
  const RowWalk<dtype, vec, unroll> walk{row, n};
  walk.run([&](int, float x) {
    bad |= !(x <= kMaxFinite);  // NaN or +Inf
    if (x > m) {
      s = (m == -kInf ? 0.0f : s * exp_weight(m, x, c)) + 1.0f;
      m = x;
    } else if (x != -kInf) {
      s += exp_weight(x, m, c);
    }
  });
  RowStats st;
  st.bad = __syncthreads_or(bad) != 0;
  st.mx = block_max(m, s_red_f);
  const double part = m == -kInf ? 0.0 : double(s) * double(exp_weight(m, st.mx, c));
  st.total = block_sum<double>(part, s_red_d);
  return st;
}

// out[i] = exp_weight(row[i], mx, c) * inv for i < n.
template <typename dtype, int vec, int unroll>
KJIT_DEVICE void write_probs(const dtype* row, float* out, int n, float mx, float c, float inv) {
  constexpr int kOutVec = vec < 4 ? vec : 4;
  constexpr int kSeg = 32 * vec * unroll;
  const int lane = int(threadIdx.x) & 31;
  const int stride = int(blockDim.x) * vec * unroll;
  for (int base = (int(threadIdx.x) >> 5) * kSeg; base < n; base += stride) {
    Vec<dtype, vec> v[unroll];
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const int i = base + (u * 32 + lane) * vec;
      if (i < n) v[u].load(row + i);
    }
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const int i = base + (u * 32 + lane) * vec;
      if (i < n) {
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

// 1 / total, or NaN for a bad row: one with a NaN or +Inf logit, only -Inf logits (mx not
// finite, or no mass), or a temperature that is not finite and > 0 (c = log2(e) / T).
KJIT_DEVICE KJIT_FORCEINLINE float inverse_total(const RowStats& st, float t, float c) {
  constexpr float kMaxFinite = 3.40282347e38f;
  const bool bad = st.bad || !(t > 0.0f && t <= kMaxFinite && c <= kMaxFinite) ||
                   !(st.mx >= -kMaxFinite) || !(st.total > 0.0);
  return bad ? __int_as_float(0x7fc00000) : float(1.0 / st.total);
}

}  // namespace detail

// Launch: grid = rows, block = a multiple of 32 up to 1024, no dynamic shared memory. vocab %
// vec == 0; input rows aligned to vec * sizeof(dtype) bytes and out rows to min(vec, 4) * 4
// bytes. out may be input itself when dtype is float (same strides). A row with a NaN or +Inf
// logit, only -Inf logits, or a temperature that is not finite and > 0 is written as NaN.
// clang-format off
template <typename dtype, int vec, int unroll>
__global__ void __launch_bounds__(1024)
softmax_kernel(const __grid_constant__ SoftmaxParams p) {
  // clang-format on
  __shared__ float s_red_f[32];
  __shared__ double s_red_d[32];
  const i64 r = blockIdx.x;
  const dtype* row = static_cast<const dtype*>(p.input) + r * p.in_stride;
  const float t = p.temp_arr == nullptr ? p.temperature : p.temp_arr[r];
  const float c = 1.44269504088896341f / t;
  const detail::RowStats st =
      detail::row_stats<dtype, vec, unroll>(row, p.vocab, c, s_red_f, s_red_d);
  detail::write_probs<dtype, vec, unroll>(row, p.out + r * p.out_stride, p.vocab, st.mx, c,
                                          detail::inverse_total(st, t, c));
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// One row over a cluster of `cluster` blocks (sm_90; the host takes it when the batch alone
// would leave most SMs idle: one 128256-token row is one SM's work otherwise). Block k takes the
// k-th of `cluster` contiguous parts of the row (each a multiple of vec long, so its loads stay
// vectors), finds its part's maximum and sum, and sends them to every block of the cluster
// (distributed shared memory); each block combines the cluster's parts in rank order, so all
// agree on the row's maximum and sum bit for bit, then writes its part. Only the partial sums'
// grouping differs from softmax_kernel (a few fp64 ulps of the sum, far below the fp32 output's).
// Launch: grid = rows * cluster, block and alignment as softmax_kernel.
// clang-format off
template <typename dtype, int vec, int unroll, int cluster>
__global__ void __cluster_dims__(cluster, 1, 1) __launch_bounds__(1024)
softmax_cluster_kernel(const __grid_constant__ SoftmaxParams p) {
  // clang-format on
  static_assert(cluster >= 2 && cluster <= 8, "portable cluster sizes only");
  const float kInf = __int_as_float(0x7f800000);
  __shared__ float s_red_f[32];
  __shared__ double s_red_d[32];
  __shared__ float s_mx[cluster];
  __shared__ double s_total[cluster];
  __shared__ int s_bad[cluster];
  const u32 rank = cluster_rank();
  const i64 r = blockIdx.x / cluster;
  const int part = ((p.vocab + cluster - 1) / cluster + vec - 1) / vec * vec;
  const int lo = min(p.vocab, int(rank) * part);
  const int n = min(p.vocab, lo + part) - lo;
  const dtype* row = static_cast<const dtype*>(p.input) + r * p.in_stride + lo;
  const float t = p.temp_arr == nullptr ? p.temperature : p.temp_arr[r];
  const float c = 1.44269504088896341f / t;
  const detail::RowStats own = detail::row_stats<dtype, vec, unroll>(row, n, c, s_red_f, s_red_d);
  cluster_sync();  // every block runs: its shared memory may be written
  if (threadIdx.x < cluster) {
    const u32 to = threadIdx.x;
    *cluster_map(&s_mx[rank], to) = own.mx;
    *cluster_map(&s_total[rank], to) = own.total;
    *cluster_map(&s_bad[rank], to) = own.bad ? 1 : 0;
  }
  cluster_sync();  // the parts are here; nobody writes another block's memory after this
  detail::RowStats st{-kInf, 0.0, false};
#pragma unroll
  for (int k = 0; k < cluster; ++k) st.mx = fmaxf(st.mx, s_mx[k]);
#pragma unroll
  for (int k = 0; k < cluster; ++k) {
    if (s_mx[k] != -kInf) st.total += s_total[k] * double(exp_weight(s_mx[k], st.mx, c));
    st.bad |= s_bad[k] != 0;
  }
  detail::write_probs<dtype, vec, unroll>(row, p.out + r * p.out_stride + lo, n, st.mx, c,
                                          detail::inverse_total(st, t, c));
}
#endif

}  // namespace sampling
}  // namespace kjit
