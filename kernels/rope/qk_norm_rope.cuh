// Per-head RMSNorm of q and k, then RoPE, in place, in one launch (Qwen3's q_norm / k_norm before
// the rotary embedding, over the q and k heads of a fused qkv projection).
//
// For each token, q head (weight q_weight) and k head (weight k_weight), in fp32:
//   n[d] = x[d] * rsqrt(mean_d(x[d]^2) + eps) * weight[d]   (over all HEAD_DIM dims)
// then the pairs of the first ROT_DIM dims of n are rotated as kjit_apply_rope_pos_ids rotates
// them (rope.cuh's angle math and detail::rotate), and the head is rounded once to DTYPE.
//
// Work split: as rope_kernel, a head takes kUnits threads (each holding its rotated vectors and
// its share of the dims past ROT_DIM) and a block covers the heads [chunk * heads_per_chunk, ...)
// of one token, q heads first. A head's sum of squares is reduced through shared memory (kUnits
// need not be a power of two, nor a head's threads within one warp), so every thread of the
// block takes part in every round of heads; a round loads up to 4 heads a thread (kInFlight)
// before it reduces them.
#pragma once

#include "common/fastdiv.cuh"
#include "common/prelude.cuh"
#include "common/vec.cuh"
#include "rope/qk_norm_rope_params.h"
#include "rope/rope.cuh"

namespace kjit {
namespace rope {

// Launch with grid = tokens * p.rope.chunks and block = kUnits * slots threads (at most 256), no
// dynamic shared memory. q, k (and their token and head strides) and the weights must be aligned
// to VEC elements; HEAD_DIM and ROT_DIM (NeoX: ROT_DIM / 2) are multiples of VEC. q and k do not
// overlap. rope_kernel's register cap (3 blocks of 256: 80 registers; the batch below took 98
// without it), no local memory at any catalog spec (unit-tested).
// clang-format off
template <typename DTYPE, int HEAD_DIM, int ROT_DIM, bool INTERLEAVE, int VEC>
__global__ void __launch_bounds__(256, 3)
qk_norm_rope_kernel(const __grid_constant__ QkNormRopeParams<ROT_DIM / 2> p) {
  // clang-format on
  pdl_enter();  // before any global access: see prelude.cuh
  static_assert(sizeof(DTYPE) == 2, "16-bit q / k only (as the host serves)");
  using Shape = detail::RopeShape<DTYPE, HEAD_DIM, ROT_DIM, INTERLEAVE, VEC, kModeFreq>;
  constexpr int kLoads = Shape::kLoads;
  constexpr int kUnits = Shape::kUnits;
  constexpr int kFreqs = Shape::kFreqs;
  // Vectors past ROT_DIM each thread covers: unit, unit + kUnits, ... Up to 4 of them stay in
  // registers between the sum of squares and the output; more (a long unrotated tail, e.g.
  // head_dim 1024 with 64 rotated: 30 vectors, 255 registers when held) are read again instead.
  constexpr int kPassIters = (Shape::kPassVecs + kUnits - 1) / kUnits;
  constexpr bool kHoldPass = kPassIters <= 4;
  // Heads a thread loads before it reduces any (rope_kernel's batching): a block of one prefill
  // token lives about one DRAM round trip, so one head a round would pay one round trip a round.
  // 4 heads of NeoX 16-byte vectors are 128 bytes a thread; held tails cost registers, so fewer
  // heads with them, and one where the tail is read again.
  constexpr int kInFlight = kPassIters == 0 ? 4 : kHoldPass && kPassIters <= 2 ? 2 : 1;
  constexpr int kHeld = kHoldPass && kPassIters > 0 ? kPassIters : 1;
  using V = Vec<DTYPE, VEC>;
  __shared__ float partial[kInFlight][256];
  const RopeArgs& a = p.rope;

  const detail::SlotMajorThread th = detail::slot_major_thread<kUnits>(a);
  const int token = th.token, chunk = th.chunk, slots = th.slots, unit = th.unit, slot = th.slot;
  const long long tk = token;

  float cs[kFreqs], sn[kFreqs];
  bool have_angles = false;

  const detail::HeadChunk heads = detail::head_chunk(a, chunk);
  // Uniform over the block: every thread runs every round (the reduction synchronizes).
  for (int h0 = heads.begin; h0 < heads.end; h0 += kInFlight * slots) {
    V x[kInFlight][kLoads], y[kInFlight][kHeld];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int h = h0 + i * slots + slot;
      if (h >= heads.end) continue;
      const DTYPE* head = Shape::head_out(a, tk, h);
#pragma unroll
      for (int j = 0; j < kLoads; ++j) x[i][j].load(head + Shape::elem_offset(unit, j));
      if constexpr (kHoldPass) {
#pragma unroll
        for (int r = 0; r < kPassIters; ++r) {
          const int v = unit + r * kUnits;
          if (v < Shape::kPassVecs) y[i][r].load(head + ROT_DIM + v * VEC);
        }
      }
    }
    if (!have_angles) {  // after the first loads are issued, so the angle math overlaps them
      detail::unit_angles(a, p.freq, token, unit, cs, sn);
      have_angles = true;
    }
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int h = h0 + i * slots + slot;
      float ss = 0.0f;
      if (h < heads.end) {
        // The rotated dims' squares, then the tail's, in one chain (one order for every form).
#pragma unroll
        for (int j = 0; j < kLoads; ++j) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) ss = fmaf(to_float(x[i][j][e]), to_float(x[i][j][e]), ss);
        }
        const DTYPE* head = Shape::head_out(a, tk, h);
#pragma unroll 4
        for (int r = 0; r < kPassIters; ++r) {
          const int v = unit + r * kUnits;
          if (v < Shape::kPassVecs) {
            V& t = y[i][kHoldPass ? r : 0];
            if constexpr (!kHoldPass) t.load(head + ROT_DIM + v * VEC);
#pragma unroll
            for (int e = 0; e < VEC; ++e) ss = fmaf(to_float(t[e]), to_float(t[e]), ss);
          }
        }
      }
      partial[i][threadIdx.x] = ss;
    }
    __syncthreads();
    float total[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      total[i] = 0.0f;
#pragma unroll
      for (int u = 0; u < kUnits; ++u) total[i] += partial[i][slot * kUnits + u];
    }
    __syncthreads();  // the next round overwrites partial
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int h = h0 + i * slots + slot;
      if (h >= heads.end) continue;
      DTYPE* head = Shape::head_out(a, tk, h);
      const DTYPE* w = static_cast<const DTYPE*>(h < a.q_heads ? p.q_weight : p.k_weight);
      const float inv_rms = rsqrtf(total[i] / float(HEAD_DIM) + p.eps);

      // Normalize the rotated dims in place (as DTYPE vectors' fp32 values), rotate, store.
      float n[kLoads * VEC];
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        V wv;
        wv.load_ro(w + Shape::elem_offset(unit, j));
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          n[j * VEC + e] = to_float(x[i][j][e]) * inv_rms * to_float(wv[e]);
        }
      }
      detail::rotate_pairs<INTERLEAVE, VEC>(cs, sn, n);
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        V o;
#pragma unroll
        for (int e = 0; e < VEC; ++e) o[e] = from_float<DTYPE>(n[j * VEC + e]);
        o.store(head + Shape::elem_offset(unit, j));
      }
#pragma unroll 4
      for (int r = 0; r < kPassIters; ++r) {
        const int v = unit + r * kUnits;
        if (v < Shape::kPassVecs) {
          V wv, o;
          if constexpr (!kHoldPass) y[i][0].load(head + ROT_DIM + v * VEC);
          const V& t = y[i][kHoldPass ? r : 0];
          wv.load_ro(w + ROT_DIM + v * VEC);
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            o[e] = from_float<DTYPE>(to_float(t[e]) * inv_rms * to_float(wv[e]));
          }
          o.store(head + ROT_DIM + v * VEC);
        }
      }
    }
  }
}

}  // namespace rope
}  // namespace kjit
