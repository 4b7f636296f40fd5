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
// once and applies them to every q and k head it visits; a v head is copied by the same threads
// at the same offsets.
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
//
// A thread loads kInFlight heads' vectors before it uses any (rope_kernel's batching), and the
// first batch before the token's page lookup and angles: the lookup is three dependent loads
// (batch index and position, the request's page range, the page) that a block would otherwise
// wait out before its first head load, at prefill sizes a block's whole life being about one
// DRAM round trip. A v head's vectors sit where a k head's would (its first kLoads at
// elem_offset, the rest past ROT_DIM), so every head kind shares the loads. A skipped token's
// k and v are still read (in bounds: they are the call's rows), not stored. The register cap is
// rope_kernel's (3 blocks of 256), for the same reason. An e4m3 cache's conversions spilled under
// that cap with four heads in flight (ptxas, sm_90a: 25-49 local loads and stores), and at 2
// blocks an SM (114 registers) that form ran 0.92x its unbatched self; it keeps one head in
// flight at 4 blocks (60 registers): 628.6 -> 529.9 us at 65536 tokens on an H100 (two heads at
// 3 blocks: 562.3).
// clang-format off
template <typename DTYPE, int HEAD_DIM, int ROT_DIM, bool INTERLEAVE, int VEC, bool CACHE_FP8>
__global__ void __launch_bounds__(256, CACHE_FP8 ? 4 : 3)
rope_append_paged_kv_kernel(const __grid_constant__ RopeAppendParams<ROT_DIM / 2> p) {
  // clang-format on
  pdl_enter();  // before any global access: see prelude.cuh
  static_assert(sizeof(DTYPE) == 2, "16-bit q / k / v only (as the host serves)");
  using Shape = detail::RopeShape<DTYPE, HEAD_DIM, ROT_DIM, INTERLEAVE, VEC, kModeFreq>;
  constexpr int kLoads = Shape::kLoads;
  constexpr int kUnits = Shape::kUnits;
  constexpr int kFreqs = Shape::kFreqs;
  // rope_kernel's: 128 bytes a thread of NeoX 16-byte vectors (an e4m3 cache: see above).
  constexpr int kInFlight = CACHE_FP8 ? 1 : 4;
  using V = Vec<DTYPE, VEC>;
  using CacheT = typename kv_cache::CacheElement<DTYPE, CACHE_FP8>::type;
  const RopeArgs& a = p.rope;
  const kv_cache::AppendPagedKvParams& kv = p.kv;

  const detail::SlotMajorThread th = detail::slot_major_thread<kUnits>(a);
  const int token = th.token, chunk = th.chunk, slots = th.slots, unit = th.unit, slot = th.slot;
  const long long tk = token;
  const int q_heads = a.q_heads, k_end = a.q_heads + a.k_heads;

  // Head h's input row: q, k or v (v heads follow the k heads).
  const auto head_src = [&](int h) -> const DTYPE* {
    if (h < k_end) return Shape::head_in(a, tk, h);
    return static_cast<const DTYPE*>(kv.append_v) + tk * kv.av_st + (h - k_end) * kv.av_sh;
  };

  int page = 0, page_slot = 0;
  bool to_cache = false;
  float cs[kFreqs], sn[kFreqs];
  bool have_token = false;

  const int h_begin = chunk * a.heads_per_chunk;
  const int h_end = min(h_begin + a.heads_per_chunk, q_heads + 2 * a.k_heads);
  for (int h0 = h_begin + slot; h0 < h_end; h0 += kInFlight * slots) {
    V x[kInFlight][kLoads];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int h = h0 + i * slots;
      if (h >= h_end) continue;
      const DTYPE* src = head_src(h);
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        // q may be rotated in place (q_out == q): not the read-only path there.
        if (h < q_heads) {
          x[i][j].load(src + Shape::elem_offset(unit, j));
        } else {
          x[i][j].load_ro(src + Shape::elem_offset(unit, j));
        }
      }
    }
    if (!have_token) {
      // Where the token's k and v rows go (nowhere when the append skips it), and its angles.
      to_cache = kv_cache::token_page_slot(kv, token, &page, &page_slot);
      detail::unit_angles(a, p.freq, token, unit, cs, sn);
      have_token = true;
    }
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int h = h0 + i * slots;
      if (h >= h_end) continue;
      const bool is_q = h < q_heads, is_v = h >= k_end;
      if (!is_q && !to_cache) continue;
      const int kvh = is_v ? h - k_end : h - q_heads;  // a k or v head's kv head
      float scale = 1.0f;
      if constexpr (CACHE_FP8) {
        if (!is_q) scale = __ldg((is_v ? kv.v_scale : kv.k_scale) + kvh * kv.scale_head_stride);
      }
      V o[kLoads];
      if (is_v) {
#pragma unroll
        for (int j = 0; j < kLoads; ++j) o[j] = x[i][j];
      } else {
        float r[kLoads * VEC];
        detail::rotate<INTERLEAVE>(x[i], cs, sn, r);
#pragma unroll
        for (int j = 0; j < kLoads; ++j) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) o[j][e] = from_float<DTYPE>(r[j * VEC + e]);
        }
      }
      const DTYPE* src = head_src(h);
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
        CacheT* out = is_v ? static_cast<CacheT*>(kv.v_cache) + page * kv.vc_sp +
                                 page_slot * kv.vc_ss + kvh * kv.vc_sh
                           : static_cast<CacheT*>(kv.k_cache) + page * kv.kc_sp +
                                 page_slot * kv.kc_ss + kvh * kv.kc_sh;
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
}

}  // namespace rope
}  // namespace kjit
