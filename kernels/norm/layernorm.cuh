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

namespace layernorm {

// s plus the sum of the vector's values, in fp32.
template <typename V>
KJIT_DEVICE KJIT_FORCEINLINE float add_values(float s, const V& x) {
#pragma unroll
  for (int e = 0; e < V::kSize; ++e) s += to_float(x[e]);
  return s;
}

// m2 plus the squared deviations of the vector's values from mean.
template <typename V>
KJIT_DEVICE KJIT_FORCEINLINE float add_deviations(float m2, const V& x, float mean) {
#pragma unroll
  for (int e = 0; e < V::kSize; ++e) {
    const float d = to_float(x[e]) - mean;
    m2 = fmaf(d, d, m2);
  }
  return m2;
}

template <typename V, typename P>
KJIT_DEVICE KJIT_FORCEINLINE void normalise(V& o, const V& x, float mean, float inv_std, const P& g,
                                            const P& b) {
  detail::round_into(
      o, [&](int e) { return fmaf((to_float(x[e]) - mean) * inv_std, g.get(e), b.get(e)); });
}

}  // namespace layernorm

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
  constexpr bool kPrefetchParams = kCacheRow && Walk::holds(kRegsPerVec + 2 * kRegsPerParam);
  // Decode sizes: the prefetched gamma / beta loads go before the programmatic-launch wait (see
  // rmsnorm_kernel).
  constexpr bool kEarly = EARLY_PARAMS && kPrefetchParams;
  detail::RowParam<P, kIters, kEarly, kPrefetchParams> gk;
  detail::RowParam<P, kIters, kEarly, kPrefetchParams> bk;
  const PARAM_DTYPE* gp = static_cast<const PARAM_DTYPE*>(p.gamma);
  const PARAM_DTYPE* bp = static_cast<const PARAM_DTYPE*>(p.beta);

  Walk::template run<kEarly>(
      p.rows,
      [&](int k, int v) {
        gk.load_early(k, gp + v * VEC);
        bk.load_early(k, bp + v * VEC);
      },
      [&](const detail::RowPlace& at, float* partials) {
        const DTYPE* x = static_cast<const DTYPE*>(p.input) + at.row * p.in_stride;
        DTYPE* y = static_cast<DTYPE*>(p.out) + at.row * p.out_stride;
        const PARAM_DTYPE* g = static_cast<const PARAM_DTYPE*>(p.gamma);
        const PARAM_DTYPE* b = static_cast<const PARAM_DTYPE*>(p.beta);

        if constexpr (kCacheRow) {
          V xv[kIters];
          Walk::each(at, [&](int k, int v) {
            xv[k].load(x + v * VEC);
            gk.load_with_row(k, g + v * VEC);
            bk.load_with_row(k, b + v * VEC);
          });

          // The row's statistics: the sum over the row, then the squared deviations from its
          // mean, over registers.
          float s = 0.0f;
          Walk::each(at, [&](int k, int) { s = layernorm::add_values(s, xv[k]); });
          const float mean = Walk::sum(s, partials) / kHidden;

          // Each pass re-derives the fp32 values from the packed row (see RowWalk::opaque).
          Walk::opaque(xv);
          float m2 = 0.0f;
          Walk::each(at, [&](int k, int) { m2 = layernorm::add_deviations(m2, xv[k], mean); });
          const float var = Walk::template sum<true>(m2, partials) / kHidden;
          const float inv_std = rsqrtf(var + p.eps);

          Walk::opaque(xv);
          Walk::each(at, [&](int k, int v) {
            P gv, bv;
            gk.get(k, g + v * VEC, gv);
            bk.get(k, b + v * VEC, bv);
            V o;
            layernorm::normalise(o, xv[k], mean, inv_std, gv, bv);
            o.store(y + v * VEC);
          });
        } else {
          // Long rows. Per chunk: the chunk's own mean and squared deviations from it (exact
          // two-pass over the registers), merged into the thread's running (n, mean, m2) by Chan
          // et al.'s update. The row's statistics then come from two sums over threads:
          //   mean = sum(n_t * mean_t) / HIDDEN,  m2 = sum(m2_t + n_t * (mean_t - mean)^2)
          // where every term is non-negative: nothing cancels.
          // Pass 1 leaves room for wide parameters as the cached path does: ptxas may hoist pass
          // 2's (read-only) gamma/beta loads into it (bf16 x 65536 with fp32 parameters spilled
          // otherwise).
          constexpr int kChunk1 =
              detail::clamp_int((kRegBudget - 2 * (kRegsPerParam - kRegsPerVec)) / kRegsPerVec, 1,
                                detail::kMaxCachedVecs);
          constexpr int kChunk2 = detail::clamp_int(kRegBudget / (kRegsPerVec + 2 * kRegsPerParam),
                                                    1, detail::kMaxCachedVecs);

          float n = 0.0f, mean_t = 0.0f, m2 = 0.0f;
#pragma unroll 1
          for (int k0 = 0; k0 < kIters; k0 += kChunk1) {
            V xv[kChunk1];
            int count = 0;
            Walk::template each_in_chunk<kChunk1>(at, k0, [&](int u, int v) {
              xv[u].load(x + v * VEC);
              count += VEC;
            });
            if (count == 0) break;  // later chunks of this thread are past the row end
            float cs = 0.0f;
            Walk::template each_in_chunk<kChunk1>(
                at, k0, [&](int u, int) { cs = layernorm::add_values(cs, xv[u]); });
            const float cn = float(count);
            const float cm = cs / cn;
            float cm2 = 0.0f;
            Walk::template each_in_chunk<kChunk1>(
                at, k0, [&](int u, int) { cm2 = layernorm::add_deviations(cm2, xv[u], cm); });
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
          for (int k0 = Walk::template last_chunk<kChunk2>(); k0 >= 0; k0 -= kChunk2) {
            V xv[kChunk2];
            P gv[kChunk2];
            P bv[kChunk2];
            Walk::template each_in_chunk<kChunk2>(at, k0, [&](int u, int v) {
              xv[u].load_last_use(x + v * VEC);
              gv[u].load_ro(g + v * VEC);
              bv[u].load_ro(b + v * VEC);
            });
            Walk::template each_in_chunk<kChunk2>(at, k0, [&](int u, int v) {
              V o;
              layernorm::normalise(o, xv[u], mean, inv_std, gv[u], bv[u]);
              o.store_streaming(y + v * VEC);
            });
          }
        }
      });
}

}  // namespace norm
}  // namespace kjit
