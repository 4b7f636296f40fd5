// Merging attention states: partial results (v, s) over disjoint key sets, where v is the
// softmax-weighted value average over its keys and s the log-sum-exp of their logits, combine to
//
//   s = log(sum_i exp(s_i)),  v = sum_i exp(s_i - s) * v_i.
//
// Used by the public kjit_merge_states / kjit_merge_states_n (s in natural log) and by split-KV
// decode attention for its own partials (kept in log2). One piece of math for both: MergeState.
#pragma once

#include "attention/attention_params.h"
#include "common/prelude.cuh"
#include "common/vec.cuh"

namespace kjit {
namespace attention {

// A running merge of N values per thread, with lse in log2. An empty partial (s = -inf) adds
// nothing; merging nothing gives v = 0 and s = -inf. NaN in any s propagates to v and s.
template <int N>
struct MergeState {
  float m;  // largest s so far (log2)
  float d;  // sum of exp2(s_i - m)
  float acc[N];

  KJIT_DEVICE KJIT_FORCEINLINE MergeState() : m(-__int_as_float(0x7f800000)), d(0.0f) {
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = 0.0f;
  }

  // Folds in one partial whose values are in v (already in float).
  KJIT_DEVICE KJIT_FORCEINLINE void add(float s_log2, const float (&v)[N]) {
    if (s_log2 == -__int_as_float(0x7f800000)) return;
    const float m_new = fmaxf(m, s_log2);
    // fmaxf drops a NaN operand; keep it instead so a NaN lse reaches the output.
    const float m_use = s_log2 != s_log2 ? s_log2 : m_new;
    const float scale = exp2f(m - m_use);  // m = -inf: 0
    const float w = exp2f(s_log2 - m_use);
    d = d * scale + w;
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = acc[i] * scale + w * v[i];
    m = m_use;
  }

  KJIT_DEVICE KJIT_FORCEINLINE bool empty() const {
    return d == 0.0f;
  }
  KJIT_DEVICE KJIT_FORCEINLINE float inv_d() const {
    return d == 0.0f ? 0.0f : 1.0f / d;
  }
  // log2 of the merged sum; -inf when nothing was merged.
  KJIT_DEVICE KJIT_FORCEINLINE float lse_log2() const {
    return d == 0.0f ? -__int_as_float(0x7f800000) : m + __log2f(d);
  }
};

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// The thread's place in the 128-thread block both merge kernels launch with: its lane among its
// row's threads_per_row threads, and its row.
template <int threads_per_row>
KJIT_DEVICE KJIT_FORCEINLINE int merge_lane() {
  static_assert(threads_per_row >= 1 && threads_per_row <= 32 &&
                    (threads_per_row & (threads_per_row - 1)) == 0,
                "threads_per_row: a power of two <= 32");
  return int(threadIdx.x) % threads_per_row;
}

template <int threads_per_row>
KJIT_DEVICE KJIT_FORCEINLINE long long merge_row() {
  return (long long)blockIdx.x * (128 / threads_per_row) + int(threadIdx.x) / threads_per_row;
}

// Launch with grid = ceil(rows / (128 / threads_per_row)) and 128 threads: threads_per_row threads
// per row (a power of two <= 32), each covering vec-element vectors of the row in turn. Every v
// pointer and (seq, head, state) stride must be aligned to vec * sizeof(dtype) bytes.
// merge_states2: v_out may be v_a or v_b itself and s_out s_a or s_b itself (in place): every
// thread reads its elements before writing them, and a row's s is read by all its threads before
// the row's first thread writes s_out (__syncwarp: a row never spans warps).
template <typename dtype, int vec, int threads_per_row>
__global__ void __launch_bounds__(128)
    merge_states2_kernel(const __grid_constant__ MergeStatesParams p) {
  using V = Vec<dtype, vec>;
  const int lane = merge_lane<threads_per_row>();
  const long long row = merge_row<threads_per_row>();
  const bool live = row < p.rows;
  const long long seq = live ? row / p.heads : 0;
  const int head = live ? int(row - seq * p.heads) : 0;
  float sa = 0.0f, sb = 0.0f;
  if (live) {
    sa = p.s_a[seq * p.sa_ss + head * p.sa_sh] * kLog2e;
    sb = p.s_b[seq * p.sb_ss + head * p.sb_sh] * kLog2e;
  }
  const dtype* va = static_cast<const dtype*>(p.v_a) + seq * p.va_ss + head * p.va_sh;
  const dtype* vb = static_cast<const dtype*>(p.v_b) + seq * p.vb_ss + head * p.vb_sh;
  dtype* vo = static_cast<dtype*>(p.v_out) + seq * p.vo_ss + head * p.vo_sh;
  float lse = 0.0f;
  for (int d0 = lane * vec; live && d0 < p.dim; d0 += threads_per_row * vec) {
    V xa, xb;
    xa.load(va + d0);
    xb.load(vb + d0);
    float fa[vec], fb[vec];
#pragma unroll
    for (int i = 0; i < vec; ++i) {
      fa[i] = to_float(xa[i]);
      fb[i] = to_float(xb[i]);
    }
    MergeState<vec> st;
    st.add(sa, fa);
    st.add(sb, fb);
    const float inv = st.inv_d();
    V y;
#pragma unroll
    for (int i = 0; i < vec; ++i) y[i] = from_float<dtype>(st.acc[i] * inv);
    y.store(vo + d0);
    lse = st.lse_log2();
  }
  if (p.s_out == nullptr) return;
  if (live && p.dim == 0) {
    MergeState<1> st;
    const float zero[1] = {0.0f};
    st.add(sa, zero);
    st.add(sb, zero);
    lse = st.lse_log2();
  }
  __syncwarp();
  if (live && lane == 0) p.s_out[seq * p.so_ss + head * p.so_sh] = lse * kLn2;
}

// v [n, seqs, heads, dim] (strides v_sn, va_ss, va_sh), s [n, seqs, heads] (s_sn, sa_ss,
// sa_sh) -> v_out, s_out. Same launch as merge_states2_kernel; v_out and s_out must not overlap
// the inputs.
template <typename dtype, int vec, int threads_per_row>
__global__ void __launch_bounds__(128)
    merge_states_n_kernel(const __grid_constant__ MergeStatesParams p) {
  using V = Vec<dtype, vec>;
  const int lane = merge_lane<threads_per_row>();
  const long long row = merge_row<threads_per_row>();
  if (row >= p.rows) return;
  const long long seq = row / p.heads;
  const int head = int(row - seq * p.heads);
  const dtype* v = static_cast<const dtype*>(p.v_a) + seq * p.va_ss + head * p.va_sh;
  const float* s = p.s_a + seq * p.sa_ss + head * p.sa_sh;
  dtype* vo = static_cast<dtype*>(p.v_out) + seq * p.vo_ss + head * p.vo_sh;
  for (int d0 = lane * vec; d0 < p.dim; d0 += threads_per_row * vec) {
    MergeState<vec> st;
    for (int i = 0; i < p.n; ++i) {
      V x;
      x.load(v + i * p.v_sn + d0);
      float f[vec];
#pragma unroll
      for (int j = 0; j < vec; ++j) f[j] = to_float(x[j]);
      st.add(s[i * p.s_sn] * kLog2e, f);
    }
    const float inv = st.inv_d();
    V y;
#pragma unroll
    for (int j = 0; j < vec; ++j) y[j] = from_float<dtype>(st.acc[j] * inv);
    y.store(vo + d0);
  }
  if (p.s_out != nullptr && lane == 0) {
    MergeState<1> st;
    const float zero[1] = {0.0f};
    for (int i = 0; i < p.n; ++i) st.add(s[i * p.s_sn] * kLog2e, zero);
    p.s_out[seq * p.so_ss + head * p.so_sh] = st.lse_log2() * kLn2;
  }
}

}  // namespace attention
}  // namespace kjit
