// RoPE and the paged KV append in one launch (FlashInfer's fused rope + append): q is rotated
// into q_out (or in place), k is rotated on its way into the key cache and v copied into the
// value cache, at the slot kjit_append_paged_kv_cache would write.
//
// Bit for bit the unfused pair kjit_apply_rope_pos_ids (q, k -> q_out, k_out) then
// kjit_append_paged_kv_cache(_fp8) (k_out, v): the rotation is rope.cuh's (same angle math,
// detail::rotate), the rotated key is rounded to DTYPE before it is stored (or divided by its
// scale and rounded to e4m3: paged_slot.cuh's quantize_e4m3), and the addressing and skip rules
// are the append's (kv_cache/paged_slot.cuh). A skipped token's q is still rotated.
//
// Work split: as rope_kernel, a head takes kUnits threads and a block covers the heads
// [chunk * heads_per_chunk, ...) of one token, here q heads, then k heads, then v heads
// (q_heads + 2 * k_heads in all). A thread computes the sin / cos of its unit's frequencies
// once and applies them to every q and k head it visits.
#pragma once

#include "common/fastdiv.cuh"
#include "common/prelude.cuh"
#include "common/vec.cuh"
#include "kv_cache/paged_slot.cuh"
#include "rope/rope.cuh"
#include "rope/rope_append_params.h"

namespace kjit {
namespace rope {

// Launch with grid = tokens * p.rope.chunks and block = kUnits * slots threads (at most 256; see
// rope_kernel for kUnits), no shared memory. q, q_out, k, v and the caches (and their token,
// head, page and slot strides) must be aligned to VEC elements (an e4m3 cache: VEC bytes);
// HEAD_DIM and ROT_DIM (NeoX: ROT_DIM / 2) are multiples of VEC. q_out is q (in place) or
// overlaps nothing read; the caches overlap nothing else.
// clang-format off
template <typename DTYPE, int HEAD_DIM, int ROT_DIM, bool INTERLEAVE, int VEC, bool CACHE_FP8>
__global__ void __launch_bounds__(256)
rope_append_paged_kv_kernel(const __grid_constant__ RopeAppendParams<ROT_DIM / 2> p) {
  // clang-format on
  pdl_enter();  // before any global access: see prelude.cuh
  static_assert(sizeof(DTYPE) == 2, "16-bit q / k / v only (as the host serves)");
  using Shape = detail::RopeShape<DTYPE, HEAD_DIM, ROT_DIM, INTERLEAVE, VEC, kModeFreq>;
  constexpr int kLoads = Shape::kLoads;
  constexpr int kUnits = Shape::kUnits;
  constexpr int kFreqs = Shape::kFreqs;
  constexpr int kHeadVecs = HEAD_DIM / VEC;
  using V = Vec<DTYPE, VEC>;
  using CacheT = typename kv_cache::CacheElement<DTYPE, CACHE_FP8>::type;
  const RopeArgs& a = p.rope;
  const kv_cache::AppendPagedKvParams& kv = p.kv;

  const detail::SlotMajorThread th = detail::slot_major_thread<kUnits>(a);
  const int token = th.token, chunk = th.chunk, slots = th.slots, unit = th.unit, slot = th.slot;
  const long long tk = token;

  // Where the token's k and v rows go (nowhere when the append skips it).
  int page = 0, page_slot = 0;
  const bool to_cache = kv_cache::token_page_slot(kv, token, &page, &page_slot);

  float cs[kFreqs], sn[kFreqs];
  detail::unit_angles(a, p.freq, token, unit, cs, sn);

  const int total = a.q_heads + 2 * a.k_heads;
  const int h_begin = chunk * a.heads_per_chunk;
  const int h_end = min(h_begin + a.heads_per_chunk, total);
  for (int h = h_begin + slot; h < h_end; h += slots) {
    const bool is_q = h < a.q_heads;
    const int kvh = is_q ? 0 : (h - a.q_heads) % a.k_heads;  // the kv head of a k or v head
    if (!is_q && !to_cache) continue;
    float scale = 1.0f;
    if constexpr (CACHE_FP8) {
      const float* s = h < a.q_heads + a.k_heads ? kv.k_scale : kv.v_scale;
      if (!is_q) scale = __ldg(s + kvh * kv.scale_head_stride);
    }
    if (h >= a.q_heads + a.k_heads) {
      // A v head: its whole row, copied (or quantized) into the value cache.
      const DTYPE* src = static_cast<const DTYPE*>(kv.append_v) + tk * kv.av_st + kvh * kv.av_sh;
      CacheT* out = static_cast<CacheT*>(kv.v_cache) + page * kv.vc_sp + page_slot * kv.vc_ss +
                    kvh * kv.vc_sh;
      for (int v = unit; v < kHeadVecs; v += kUnits) {
        V x;
        x.load_ro(src + v * VEC);
        kv_cache::store_cache_vec<CACHE_FP8>(out + v * VEC, x, scale);
      }
      continue;
    }
    // A q or k head: the rotated dims, then the dims past ROT_DIM.
    const DTYPE* src = Shape::head_in(a, tk, h);
    V x[kLoads];
#pragma unroll
    for (int j = 0; j < kLoads; ++j) x[j].load(src + Shape::elem_offset(unit, j));
    float r[kLoads * VEC];
    detail::rotate<INTERLEAVE>(x, cs, sn, r);
    V o[kLoads];
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) o[j][e] = from_float<DTYPE>(r[j * VEC + e]);
    }
    if (is_q) {
      DTYPE* out = Shape::head_out(a, tk, h);
#pragma unroll
      for (int j = 0; j < kLoads; ++j) o[j].store(out + Shape::elem_offset(unit, j));
      if (a.copy_q_pass) {
        for (int v = unit; v < Shape::kPassVecs; v += kUnits) {
          V t;
          t.load(src + ROT_DIM + v * VEC);
          t.store(out + ROT_DIM + v * VEC);
        }
      }
    } else {
      CacheT* out = static_cast<CacheT*>(kv.k_cache) + page * kv.kc_sp + page_slot * kv.kc_ss +
                    kvh * kv.kc_sh;
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        kv_cache::store_cache_vec<CACHE_FP8>(out + Shape::elem_offset(unit, j), o[j], scale);
      }
      for (int v = unit; v < Shape::kPassVecs; v += kUnits) {
        V t;
        t.load_ro(src + ROT_DIM + v * VEC);
        kv_cache::store_cache_vec<CACHE_FP8>(out + ROT_DIM + v * VEC, t, scale);
      }
    }
  }
}

}  // namespace rope
}  // namespace kjit
