// RMSNorm (and Gemma-style RMSNorm with weight + 1) over the last dimension.
//
//   out[r, i] = DTYPE(float(x[r, i]) * rsqrt(mean_i(float(x[r, i])^2) + eps)
//                     * (float(w[i]) + offset))
//
// The op is purely bandwidth-bound (about 2 flops per byte), so the design goal is to touch HBM
// exactly once per input and output element: each row of x is read once into registers, reduced,
// then normalised from those registers. Only rows too long to hold that way fall back to a second
// read of x, which is expected to hit L2. Short rows (a few hundred bytes) are best given fewer
// than 32 threads each: a warp then holds several rows and every lane still has loads in flight.
#pragma once

#include "common/prelude.cuh"
#include "common/reduce.cuh"
#include "common/vec.cuh"
#include "norm/norm_params.h"
#include "norm/row_common.cuh"

namespace kjit {
namespace norm {

namespace rmsnorm {

template <typename T, int N>
KJIT_DEVICE KJIT_FORCEINLINE void normalise(Vec<T, N>& o, const Vec<T, N>& x, const Vec<T, N>& w,
                                            float inv_rms, float w_off) {
#pragma unroll
  for (int e = 0; e < N; ++e) {
    o[e] = from_float<T>(to_float(x[e]) * inv_rms * (to_float(w[e]) + w_off));
  }
}

}  // namespace rmsnorm

// Launch with grid = ceil(rows / ROWS_PER_BLOCK), block = THREADS_PER_ROW * ROWS_PER_BLOCK and no
// dynamic shared memory. input, weight, out and both row strides must be aligned to
// VEC * sizeof(DTYPE) bytes. out may be input itself (in place, equal strides); otherwise out must
// not overlap input, and it must never overlap weight (read through the non-coherent path).
// EARLY_PARAMS (decode-size row counts, chosen by the host): the weight is read before the
// programmatic-launch wait, so it must not be written by the kernel before this one on the
// stream (model parameters never are; see pdl_wait in prelude.cuh). Large row counts keep the
// default, whose code is unchanged by this option.
// clang-format would read the launch bound as a pointer declaration.
// clang-format off
template <typename DTYPE, int HIDDEN, int VEC, int THREADS_PER_ROW, int ROWS_PER_BLOCK,
          bool EARLY_PARAMS>
__global__ void __launch_bounds__(THREADS_PER_ROW * ROWS_PER_BLOCK)
rmsnorm_kernel(const __grid_constant__ RmsNormParams p) {
  // clang-format on
  using Walk = detail::RowWalk<DTYPE, HIDDEN, VEC, THREADS_PER_ROW, ROWS_PER_BLOCK>;
  using V = typename Walk::V;
  constexpr int kRegsPerVec = Walk::kRegsPerVec;

  constexpr bool kCacheRow = Walk::holds(kRegsPerVec);
  // Issuing the weight loads together with x hides their (L2/L1) latency behind x's DRAM
  // latency, which is most of the run time when there are only a few rows (decode). It doubles
  // the register footprint, so only where that still fits.
  constexpr bool kPrefetchWeight = kCacheRow && Walk::holds(2 * kRegsPerVec);
  // The decode-size variant issues the prefetched weight loads before the programmatic-launch
  // wait: at a few rows the kernel's time after the wait is a chain of round trips (x, the
  // reduction, the weight, the store), and ptxas sinks read-only (.nc) weight loads past the
  // reduction. Plain loads written before the wait stay there.
  constexpr bool kEarly = EARLY_PARAMS && kPrefetchWeight;
  detail::RowParam<V, Walk::kIters, kEarly, kPrefetchWeight> wk;
  Walk::template run<kEarly>(
      p.rows, wk, static_cast<const DTYPE*>(p.weight),
      [&](const detail::RowPlace& at, float* partials) {
        // 64-bit: rows * stride can exceed 2^31 elements.
        const DTYPE* x = static_cast<const DTYPE*>(p.input) + at.row * p.in_stride;
        DTYPE* y = static_cast<DTYPE*>(p.out) + at.row * p.out_stride;
        const DTYPE* w = static_cast<const DTYPE*>(p.weight);
        const float w_off = p.weight_offset;
        if constexpr (kCacheRow) {
          // All loads first, so each thread has its whole share of the row in flight at once.
          V xv[Walk::kIters];
          Walk::each(at, [&](int k, int v) {
            xv[k].load(x + v * VEC);
            wk.load_with_row(k, w + v * VEC);
          });
          float ss = 0.0f;
          Walk::each(at, [&](int k, int) { ss = detail::add_squares(ss, xv[k]); });
          const float inv_rms = Walk::inv_rms(ss, partials, p.eps);
          Walk::weigh_cached(at, xv, wk, w, y, [&](V& o, const V& xk, const V& wv) {
            rmsnorm::normalise(o, xk, wv, inv_rms, w_off);
          });
        } else {
          // Long rows: two passes over x. The second read should come from L2, since the row was
          // just read by the same block. Each pass works in chunks of vectors loaded together so
          // that a thread still keeps several independent loads in flight.
          //
          // All resident rows together can outgrow L2 (two 256 KB rows per SM is 67 MB), so the
          // second pass helps L2 keep what is still to be re-read: it walks the row backwards
          // (the most recently read part first), marks its reads as last use and streams its
          // stores. On H200 this took fp32 x 65536 from 3.1 to 3.6 TB/s and bf16 x 262144 from
          // 2.8 to 3.0 TB/s.
          constexpr int kChunk1 =
              detail::clamp_int(Walk::kRegBudget / kRegsPerVec, 1, detail::kMaxCachedVecs);
          constexpr int kChunk2 =
              detail::clamp_int(Walk::kRegBudget / (2 * kRegsPerVec), 1, detail::kMaxCachedVecs);

          float ss = 0.0f;
#pragma unroll 1
          for (int k0 = 0; k0 < Walk::kIters; k0 += kChunk1) {
            V xv[kChunk1];
            Walk::template each_in_chunk<kChunk1>(at, k0,
                                                  [&](int u, int v) { xv[u].load(x + v * VEC); });
            Walk::template each_in_chunk<kChunk1>(
                at, k0, [&](int u, int) { ss = detail::add_squares(ss, xv[u]); });
          }
          const float inv_rms = Walk::inv_rms(ss, partials, p.eps);

          Walk::template weigh_backward<kChunk2>(at, x, w, y, [&](V& o, const V& xk, const V& wk) {
            rmsnorm::normalise(o, xk, wk, inv_rms, w_off);
          });
        }
      });
}

}  // namespace norm
}  // namespace kjit
