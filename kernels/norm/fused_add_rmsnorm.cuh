// Residual add fused with RMSNorm (and its Gemma form, weight + 1), both in place:
//
//   residual[r, i] = DTYPE(float(x[r, i]) + float(residual[r, i]))
//   x[r, i]        = DTYPE(float(residual[r, i])
//                          * rsqrt(mean_i(float(residual[r, i])^2) + eps) * (float(w[i]) + offset))
//
// The norm reads the new residual as stored (rounded to DTYPE), so the pair gives what the
// unfused sequence `residual = x + residual; x = rmsnorm(residual)` in DTYPE gives, which is what
// inference engines compare against. Unfused, that is three reads and two writes of a row; here x
// and residual are read once and each written once: the add, the reduction and the normalisation
// all run on the registers that hold the row.
#pragma once

#include "common/prelude.cuh"
#include "common/reduce.cuh"
#include "common/vec.cuh"
#include "norm/norm_params.h"
#include "norm/row_common.cuh"

namespace kjit {
namespace norm {

namespace fused_add_rmsnorm {

// s = DTYPE(x + r), the new residual; returns ss plus its squares (of the rounded values).
template <typename V>
KJIT_DEVICE KJIT_FORCEINLINE float add_rows(V& s, const V& x, const V& r, float ss) {
  detail::round_into(s, [&](int e) { return to_float(x[e]) + to_float(r[e]); });
  return detail::add_squares(ss, s);
}

template <typename V>
KJIT_DEVICE KJIT_FORCEINLINE void normalise(V& o, const V& s, const V& w, float inv_rms,
                                            float w_off) {
  detail::round_into(o, [&](int e) { return to_float(s[e]) * inv_rms * (to_float(w[e]) + w_off); });
}

}  // namespace fused_add_rmsnorm

// Launch with grid = ceil(rows / ROWS_PER_BLOCK), block = THREADS_PER_ROW * ROWS_PER_BLOCK and no
// dynamic shared memory. input, residual, weight and both row strides must be aligned to
// VEC * sizeof(DTYPE) bytes. input and residual must not overlap each other, and neither may
// overlap weight (read through the non-coherent path). EARLY_PARAMS: the weight is read before the
// programmatic-launch wait, as in rmsnorm_kernel (same contract).
// clang-format would read the launch bound as a pointer declaration.
// clang-format off
template <typename DTYPE, int HIDDEN, int VEC, int THREADS_PER_ROW, int ROWS_PER_BLOCK,
          bool EARLY_PARAMS>
__global__ void __launch_bounds__(THREADS_PER_ROW * ROWS_PER_BLOCK)
fused_add_rmsnorm_kernel(const __grid_constant__ FusedAddRmsNormParams p) {
  // clang-format on
  using Walk = detail::RowWalk<DTYPE, HIDDEN, VEC, THREADS_PER_ROW, ROWS_PER_BLOCK>;
  using V = typename Walk::V;
  constexpr int kIters = Walk::kIters;
  constexpr int kRegsPerVec = Walk::kRegsPerVec;

  // Both rows are in registers while their loads are in flight, so a cached row costs twice
  // what it does in rmsnorm_kernel; the weight prefetch (see there) a third share. Not with
  // 1024-thread blocks: there ptxas aims at 32 registers (two blocks per SM) and spilled rather
  // than exceed them (sm_90, fp16 x 10240 at 4-byte alignment); rows that need such blocks are
  // long enough for the weight's L2 latency to be a small part of their time.
  constexpr bool kCacheRow = Walk::holds(2 * kRegsPerVec);
  constexpr bool kPrefetchWeight =
      kCacheRow && Walk::kThreads < 1024 && Walk::holds(3 * kRegsPerVec);
  // Decode sizes: the prefetched weight loads go before the programmatic-launch wait (see
  // rmsnorm_kernel).
  constexpr bool kEarly = EARLY_PARAMS && kPrefetchWeight;
  detail::RowParam<V, kIters, kEarly, kPrefetchWeight> wk;
  Walk::template run<kEarly>(
      p.rows, wk, static_cast<const DTYPE*>(p.weight),
      [&](const detail::RowPlace& at, float* partials) {
        DTYPE* x = static_cast<DTYPE*>(p.input) + at.row * p.in_stride;
        DTYPE* res = static_cast<DTYPE*>(p.residual) + at.row * p.res_stride;
        const DTYPE* w = static_cast<const DTYPE*>(p.weight);
        const float w_off = p.weight_offset;
        if constexpr (kCacheRow) {
          V xv[kIters];
          V rv[kIters];
          Walk::each(at, [&](int k, int v) {
            xv[k].load(x + v * VEC);
            rv[k].load(res + v * VEC);
            wk.load_with_row(k, w + v * VEC);
          });

          // The sum takes the registers of x and the old residual (both dead after it) and goes
          // out right away, so its stores drain while the row reduces.
          V sv[kIters];
          float ss = 0.0f;
          Walk::each(at, [&](int k, int v) {
            ss = fused_add_rmsnorm::add_rows(sv[k], xv[k], rv[k], ss);
            sv[k].store(res + v * VEC);
          });
          const float inv_rms = Walk::inv_rms(ss, partials, p.eps);
          Walk::weigh_cached(at, sv, wk, w, x, [&](V& o, const V& sk, const V& wv) {
            fused_add_rmsnorm::normalise(o, sk, wv, inv_rms, w_off);
          });
        } else {
          // Long rows: the first pass adds, stores the new residual and sums its squares chunk by
          // chunk; the second reads the new residual back (from L2: this block just wrote it, and
          // each thread reads only the vectors it wrote itself, so program order makes that read
          // see the sum) and writes the norm over x. Backwards, with last-use loads and streaming
          // stores, for the reasons given in rmsnorm_kernel.
          // Two vectors per step, each with its address (8-byte vectors at 8 per chunk spilled).
          constexpr int kChunk = detail::clamp_int(Walk::kRegBudget / (2 * (kRegsPerVec + 1)), 1,
                                                   detail::kMaxCachedVecs);

          float ss = 0.0f;
#pragma unroll 1
          for (int k0 = 0; k0 < kIters; k0 += kChunk) {
            V xv[kChunk];
            V rv[kChunk];
            Walk::template each_in_chunk<kChunk>(at, k0, [&](int u, int v) {
              xv[u].load(x + v * VEC);
              rv[u].load(res + v * VEC);
            });
            Walk::template each_in_chunk<kChunk>(at, k0, [&](int u, int v) {
              V sv;
              ss = fused_add_rmsnorm::add_rows(sv, xv[u], rv[u], ss);
              sv.store(res + v * VEC);
            });
          }
          const float inv_rms = Walk::inv_rms(ss, partials, p.eps);

          Walk::template weigh_backward<kChunk>(at, res, w, x, [&](V& o, const V& sk, const V& wk) {
            fused_add_rmsnorm::normalise(o, sk, wk, inv_rms, w_off);
          });
        }
      });
}

}  // namespace norm
}  // namespace kjit
