// LayerNorm over the last dimension, biased variance, fp32 statistics:
//
//   mean = mean_i(x[r, i]),  var = mean_i((x[r, i] - mean)^2)
//   out[r, i] = DTYPE((x[r, i] - mean) * rsqrt(var + eps) * gamma[i] + beta[i])
//
// The variance is never E[x^2] - mean^2: activations with a large common offset (|mean| >> std)
// lose every significant digit of the variance to cancellation in that form. A row held in
// registers is a true two-pass: two row reductions, the mean and then the squared deviations
// from it (extra reductions, no extra memory traffic). A one-reduction form (each thread's exact
// (count, mean, m2) merged with Chan et al.'s update) was slower at decode sizes once those rows
// took one vector a thread: on the H200, back to back, 1.43 / 1.66 us at 1 / 64 rows
// against 1.37 / 1.60 us for the two reductions.
//
// Rows too long to hold in registers take per-thread chunk statistics merged with Chan et al.'s
// pairwise update, then a cross-thread merge in the same form (two sums), and a second read of x
// from L2 for the output: still one pass over HBM for the statistics, and still no cancellation.
//
// gamma and beta are DTYPE or fp32 (PARAM_DTYPE); fp32 parameters beside bf16/fp16 activations
// are read as wider accesses (ParamVec).
#pragma once

#include "common/prelude.cuh"
#include "common/reduce.cuh"
#include "common/vec.cuh"
#include "norm/norm_params.h"
#include "norm/row_common.cuh"

namespace kjit {
namespace norm {

// Launch with grid = ceil(rows / ROWS_PER_BLOCK), block = THREADS_PER_ROW * ROWS_PER_BLOCK and no
// dynamic shared memory. input, out and both row strides must be aligned to VEC * sizeof(DTYPE)
// bytes, gamma and beta to min(VEC * sizeof(PARAM_DTYPE), 16) bytes. out may be input itself (in
// place, equal strides); otherwise it must not overlap input, and it must never overlap gamma or
// beta (read through the non-coherent path). EARLY_PARAMS: gamma and beta are read before the
// programmatic-launch wait, as the weight in rmsnorm_kernel (same contract).
// clang-format would read the launch bound as a pointer declaration.
// clang-format off
template <typename DTYPE, typename PARAM_DTYPE, int HIDDEN, int VEC, int THREADS_PER_ROW,
          int ROWS_PER_BLOCK, bool EARLY_PARAMS>
__global__ void __launch_bounds__(THREADS_PER_ROW * ROWS_PER_BLOCK)
layernorm_kernel(const __grid_constant__ LayerNormParams p) {
  // clang-format on
  using Walk = detail::RowWalk<DTYPE, HIDDEN, VEC, THREADS_PER_ROW, ROWS_PER_BLOCK>;
  using V = typename Walk::V;
  using P = detail::ParamVec<PARAM_DTYPE, VEC>;
  constexpr int kIters = Walk::kIters;
  constexpr int kRegsPerVec = Walk::kRegsPerVec;
  constexpr int kRegBudget = Walk::kRegBudget;
  constexpr int kRegsPerParam = detail::regs_per_vec<PARAM_DTYPE, VEC>();
  // Divisions, not products with a rounded 1/HIDDEN: one each per row, and the mean picks up one
  // rounding instead of two, which matters when |mean| >> std.
  constexpr float kHidden = float(HIDDEN);

  // The output loop holds a gamma and a beta vector beside the row. The reserve covers that much
  // at the activation's width (as for rmsnorm_kernel's weight); wider fp32 parameters take the
  // excess from the row's share (bf16 x 65536 with fp32 gamma/beta spilled without this).
  constexpr bool kCacheRow = kIters <= detail::kMaxCachedVecs &&
                             kIters * kRegsPerVec + 2 * (kRegsPerParam - kRegsPerVec) <= kRegBudget;
  // gamma and beta issued with x hide their latency behind x's (see rmsnorm_kernel), where the
  // registers allow.
  constexpr bool kPrefetchParams =
      kCacheRow && kIters * (kRegsPerVec + 2 * kRegsPerParam) <= kRegBudget;
  // Decode sizes: the prefetched gamma / beta loads go before the programmatic-launch wait (see
  // rmsnorm_kernel).
  constexpr bool kEarly = EARLY_PARAMS && kPrefetchParams;
  P gearly[kEarly ? kIters : 1];
  P bearly[kEarly ? kIters : 1];
  const PARAM_DTYPE* gp = static_cast<const PARAM_DTYPE*>(p.gamma);
  const PARAM_DTYPE* bp = static_cast<const PARAM_DTYPE*>(p.beta);
  Walk::template enter<kEarly>([&](int k, int v) {
    gearly[k].load(gp + v * VEC);
    bearly[k].load(bp + v * VEC);
  });

  int tid;
  i64 row;
  bool active;
  if (!Walk::place(p.rows, tid, row, active)) return;

  const DTYPE* x = static_cast<const DTYPE*>(p.input) + row * p.in_stride;
  DTYPE* y = static_cast<DTYPE*>(p.out) + row * p.out_stride;
  const PARAM_DTYPE* g = static_cast<const PARAM_DTYPE*>(p.gamma);
  const PARAM_DTYPE* b = static_cast<const PARAM_DTYPE*>(p.beta);

  if constexpr (kCacheRow) {
    V xv[kIters];
    P gv[kPrefetchParams && !kEarly ? kIters : 1];
    P bv[kPrefetchParams && !kEarly ? kIters : 1];
#pragma unroll
    for (int k = 0; k < kIters; ++k) {
      const int v = tid + k * THREADS_PER_ROW;
      if (Walk::in_row(active, k, v)) {
        xv[k].load(x + v * VEC);
        if constexpr (kPrefetchParams && !kEarly) {
          gv[k].load_ro(g + v * VEC);
          bv[k].load_ro(b + v * VEC);
        }
      }
    }

    // The row's statistics: the sum over the row, then the squared deviations from its mean,
    // over registers.
    __shared__ float partials[Walk::kPartials];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kIters; ++k) {
      const int v = tid + k * THREADS_PER_ROW;
      if (Walk::in_row(active, k, v)) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) s += to_float(xv[k][e]);
      }
    }
    const float mean = Walk::sum(s, partials) / kHidden;

    // Each pass re-derives the fp32 values from the packed row (see rmsnorm_kernel).
#pragma unroll
    for (int k = 0; k < kIters; ++k) xv[k].opaque();
    float m2 = 0.0f;
#pragma unroll
    for (int k = 0; k < kIters; ++k) {
      const int v = tid + k * THREADS_PER_ROW;
      if (Walk::in_row(active, k, v)) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float d = to_float(xv[k][e]) - mean;
          m2 = fmaf(d, d, m2);
        }
      }
    }
    const float var = Walk::template sum<true>(m2, partials) / kHidden;
    const float inv_std = rsqrtf(var + p.eps);

#pragma unroll
    for (int k = 0; k < kIters; ++k) xv[k].opaque();
#pragma unroll
    for (int k = 0; k < kIters; ++k) {
      const int v = tid + k * THREADS_PER_ROW;
      if (Walk::in_row(active, k, v)) {
        P gk, bk;
        if constexpr (kEarly) {
          gk = gearly[k];
          bk = bearly[k];
        } else if constexpr (kPrefetchParams) {
          gk = gv[k];
          bk = bv[k];
        } else {
          // Coherent on purpose, as in rmsnorm_kernel: keeps ptxas from hoisting every parameter
          // load above the stores and overflowing the register cap.
          gk.load(g + v * VEC);
          bk.load(b + v * VEC);
        }
        V o;
        detail::round_into(o, [&](int e) {
          return fmaf((to_float(xv[k][e]) - mean) * inv_std, gk.get(e), bk.get(e));
        });
        o.store(y + v * VEC);
      }
    }
  } else {
    // Long rows. Per chunk: the chunk's own mean and squared deviations from it (exact two-pass
    // over the registers), merged into the thread's running (n, mean, m2) by Chan et al.'s
    // update. The row's statistics then come from two sums over threads:
    //   mean = sum(n_t * mean_t) / HIDDEN,  m2 = sum(m2_t + n_t * (mean_t - mean)^2)
    // where every term is non-negative: nothing cancels.
    // Pass 1 leaves room for wide parameters as the cached path does: ptxas may hoist pass 2's
    // (read-only) gamma/beta loads into it (bf16 x 65536 with fp32 parameters spilled otherwise).
    constexpr int kChunk1 = detail::clamp_int(
        (kRegBudget - 2 * (kRegsPerParam - kRegsPerVec)) / kRegsPerVec, 1, detail::kMaxCachedVecs);
    constexpr int kChunk2 = detail::clamp_int(kRegBudget / (kRegsPerVec + 2 * kRegsPerParam), 1,
                                              detail::kMaxCachedVecs);
    __shared__ float partials[Walk::kPartials];

    float n = 0.0f, mean_t = 0.0f, m2 = 0.0f;
#pragma unroll 1
    for (int k0 = 0; k0 < kIters; k0 += kChunk1) {
      V xv[kChunk1];
      int count = 0;
#pragma unroll
      for (int u = 0; u < kChunk1; ++u) {
        const int v = tid + (k0 + u) * THREADS_PER_ROW;
        if (Walk::in_range(active, v)) {
          xv[u].load(x + v * VEC);
          count += VEC;
        }
      }
      if (count == 0) break;  // later chunks of this thread are past the row end as well
      float cs = 0.0f;
#pragma unroll
      for (int u = 0; u < kChunk1; ++u) {
        const int v = tid + (k0 + u) * THREADS_PER_ROW;
        if (Walk::in_range(active, v)) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) cs += to_float(xv[u][e]);
        }
      }
      const float cn = float(count);
      const float cm = cs / cn;
      float cm2 = 0.0f;
#pragma unroll
      for (int u = 0; u < kChunk1; ++u) {
        const int v = tid + (k0 + u) * THREADS_PER_ROW;
        if (Walk::in_range(active, v)) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const float d = to_float(xv[u][e]) - cm;
            cm2 = fmaf(d, d, cm2);
          }
        }
      }
      const float nn = n + cn;
      const float delta = cm - mean_t;
      mean_t = fmaf(delta, cn / nn, mean_t);
      m2 += cm2 + delta * delta * (n * cn / nn);
      n = nn;
    }
    const float mean = Walk::sum(n * mean_t, partials) / kHidden;
    const float dm = mean_t - mean;
    const float var = Walk::template sum<true>(fmaf(n * dm, dm, m2), partials) / kHidden;
    const float inv_std = rsqrtf(var + p.eps);

#pragma unroll 1
    for (int k0 = (kIters - 1) / kChunk2 * kChunk2; k0 >= 0; k0 -= kChunk2) {
      V xv[kChunk2];
      P gv[kChunk2];
      P bv[kChunk2];
#pragma unroll
      for (int u = 0; u < kChunk2; ++u) {
        const int v = tid + (k0 + u) * THREADS_PER_ROW;
        if (Walk::in_range(active, v)) {
          xv[u].load_last_use(x + v * VEC);
          gv[u].load_ro(g + v * VEC);
          bv[u].load_ro(b + v * VEC);
        }
      }
#pragma unroll
      for (int u = 0; u < kChunk2; ++u) {
        const int v = tid + (k0 + u) * THREADS_PER_ROW;
        if (Walk::in_range(active, v)) {
          V o;
          detail::round_into(o, [&](int e) {
            return fmaf((to_float(xv[u][e]) - mean) * inv_std, gv[u].get(e), bv[u].get(e));
          });
          o.store_streaming(y + v * VEC);
        }
      }
    }
  }
}

}  // namespace norm
}  // namespace kjit
