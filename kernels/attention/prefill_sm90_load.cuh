// The producer warpgroup of prefill_sm90_kernel (attention/prefill_sm90.cuh): it streams the CTA's
// Q rows once and its K / V tiles of kv_tile keys through the shared-memory ring, and publishes
// each tile on the stage's full barrier together with per-key validity flags.
//
// Two ways to move a tile:
//   TMA boxes (PrefillSm90Params::kv_tma): for a ragged KV and for pages of a power-of-two size
//     >= 8, a tile of keys below kv_len is a few boxes of box_rows keys (one per page, or one for
//     the whole tile), issued by the threads that own the first key of each box. The producer
//     never waits for its loads: the tensor cores' consumers wait on the barrier's transaction
//     count. Invalid pages get coordinate -1, which TMA loads as zeros.
//   cp.async per key (every other case, and a tile that reaches past kv_len, whose rows past it
//     must be zeros rather than whatever the cache holds there: P is 0 for them, but 0 x NaN is
//     not): each thread looks up one key, the offsets go through shared memory, and 16-byte copies
//     zero-fill the rest.
// Both look each key up once per tile (an earlier version looked every key up again for each of
// its 16-byte chunks and for K and V, which kept the producer, not the tensor cores, busiest).
#pragma once

#include "attention/prefill.cuh"
#include "common/hopper.cuh"

namespace kjit {
namespace attention {

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of `rows` rows of head_dim
// elements, stored as blocks of 64 columns (rows x 128 bytes each), 128-byte swizzled: the layout
// TMA's 128-byte swizzle writes and the wgmma descriptors read.
template <int rows>
KJIT_DEVICE KJIT_FORCEINLINE int sw128_offset(int row, int chunk) {
  return (chunk >> 3) * (rows * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

// The ring a producer fills and its consumers drain: `stages` K and V tiles with their barriers,
// the keys' validity (keys past kv_len count as valid: the row bounds mask them) and whether each
// producer warp's keys are all valid (ok: the consumers skip the per-key test when all are).
template <int kv_tile, int stages>
struct PrefillRing {
  u64 full_k[stages], empty_k[stages], full_v[stages], empty_v[stages];
  unsigned char valid[stages][kv_tile];
  int ok[stages][4];
  long long k_off[2][kv_tile], v_off[2][kv_tile];  // cp.async tiles: a key's rows, -1: none

  // One thread, before the barrier that publishes them: a full barrier takes the producer
  // warpgroup's 128 arrivals (and the TMA bytes), an empty one the 8 consumer warps'.
  KJIT_DEVICE KJIT_FORCEINLINE void init() {
#pragma unroll
    for (int s = 0; s < stages; ++s) {
      hopper::mbarrier_init(&full_k[s], 128);
      hopper::mbarrier_init(&empty_k[s], 8);
      hopper::mbarrier_init(&full_v[s], 128);
      hopper::mbarrier_init(&empty_v[s], 8);
    }
  }
};

// The producer's copies of the Q tile: rows past the request's are zeros. mma_dtype other than
// dtype (fp8 keys and values: fp16 MMAs, a bf16 Q): each 16-byte chunk is read, converted and
// stored by this thread (plain stores: the fence before the first K tile's arrive publishes
// them to the tensor cores), as prefill.cuh's load_q_tile converts for the mma.sync kernel.
template <typename dtype, int head_dim, typename mma_dtype = dtype>
KJIT_DEVICE KJIT_FORCEINLINE void produce_q(const PrefillParams& p, const PrefillWork& w, int h,
                                            int tid, unsigned char* q_s) {
  constexpr int kChunks = head_dim / 8;
  constexpr bool kConvert = !IsSame<dtype, mma_dtype>::value;
  const int q_rows = w.q_len * p.group;
  // Unrolled so that the converting form has several loads in flight, not one a chunk.
#pragma unroll 4
  for (int i = tid; i < kPrefillSm90Rows * kChunks; i += 128) {
    const int r = i / kChunks, ch = i % kChunks;
    const int m = w.m0 + r;
    const dtype* src = static_cast<const dtype*>(p.q);
    int bytes = 0;
    if (m < q_rows) {
      src += (long long)(w.q_begin + m / p.group) * p.q_sn +
             (long long)(h * p.group + m % p.group) * p.q_sh + ch * 8;
      bytes = 16;
    }
    if constexpr (kConvert) {
      uint4 in = make_uint4(0u, 0u, 0u, 0u), out;
      if (bytes != 0) in = __ldg(reinterpret_cast<const uint4*>(src));
      const u32* x = reinterpret_cast<const u32*>(&in);
      u32* y = reinterpret_cast<u32*>(&out);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const dtype* v = reinterpret_cast<const dtype*>(x + e);
        y[e] = pack2<mma_dtype>(to_float(v[0]), to_float(v[1]));
      }
      *reinterpret_cast<uint4*>(q_s + sw128_offset<kPrefillSm90Rows>(r, ch)) = out;
    } else {
      cp_async<16>(smem_addr(q_s + sw128_offset<kPrefillSm90Rows>(r, ch)), src, bytes);
    }
  }
}

// Records key `tid` of the tile (one key per thread) in the ring's validity flags.
template <int kv_tile, int stages>
KJIT_DEVICE KJIT_FORCEINLINE void mark_key(PrefillRing<kv_tile, stages>& ring, int s, int tid,
                                           bool key_ok) {
  if (tid < kv_tile) ring.valid[s][tid] = key_ok ? 1 : 0;
  const bool warp_all = __all_sync(0xffffffffu, key_ok);
  if (tid % 32 == 0) ring.ok[s][tid / 32] = warp_all ? 1 : 0;
}

// cp.async tiles, step 1: thread tid looks key tile_start + tid up, stores its rows' offsets in
// offset buffer `buf` and its validity; the named barrier makes the offsets visible to the
// producer warpgroup (each buffer is rewritten two tiles later, a barrier after its last read).
template <int kv_tile, int stages>
KJIT_DEVICE KJIT_FORCEINLINE void look_up_keys(const PrefillParams& p, const PrefillWork& w, int h,
                                               int tid, int tile_start, int s, int buf,
                                               PrefillRing<kv_tile, stages>& ring) {
  bool key_ok = true;
  if (tid < kv_tile) {
    const int t = tile_start + tid;
    long long k_off = 0, v_off = 0;
    const bool row_ok = t < w.kv_len && key_row(p, w, h, t, k_off, v_off);
    key_ok = row_ok || t >= w.kv_len;
    ring.k_off[buf][tid] = row_ok ? k_off : -1;
    ring.v_off[buf][tid] = row_ok ? v_off : -1;
  }
  mark_key(ring, s, tid, key_ok);
  hopper::named_barrier_sync(1, 128);
}

// cp.async tiles, step 2: the K (or V) rows of the keys looked up into buffer `buf`, kChunks
// threads per row; a key without rows is zero-filled.
template <typename dtype, int head_dim, int kv_tile>
KJIT_DEVICE KJIT_FORCEINLINE void copy_rows(const void* base, const long long* off, int tid,
                                            unsigned char* dst) {
  constexpr int kChunks = head_dim / 8;
  constexpr int kRowsPerPass = 128 / kChunks;
  const int ch = tid % kChunks;
#pragma unroll 4
  for (int r = tid / kChunks; r < kv_tile; r += kRowsPerPass) {
    const long long o = off[r];
    const dtype* src = static_cast<const dtype*>(base) + (o < 0 ? 0 : o) + ch * 8;
    cp_async<16>(smem_addr(dst + sw128_offset<kv_tile>(r, ch)), src, o < 0 ? 0 : 16);
  }
}

// cp.async tiles of the TMA path: copy_rows, waited for at once and published on `bar`.
template <typename dtype, int head_dim, int kv_tile>
KJIT_DEVICE KJIT_FORCEINLINE void copy_rows_now(const void* base, const long long* off, int tid,
                                                unsigned char* dst, u64* bar) {
  copy_rows<dtype, head_dim, kv_tile>(base, off, tid, dst);
  cp_async_commit();
  cp_async_wait<0>();
  hopper::fence_proxy_async_smem();
  hopper::mbarrier_arrive(bar);
}

// TMA tiles: the box coordinates of key tile_start + tid when it starts a box (owner), and every
// key's validity. Ragged: the "page" is 0 and the slot is the key's row; paged: pages past the
// request's or outside the cache get page -1 (zeros).
struct BoxCoord {
  bool owner;
  bool key_ok;
  int slot, page;
};

template <int kv_tile>
KJIT_DEVICE KJIT_FORCEINLINE BoxCoord box_coord(const PrefillSm90Params& a, const PrefillWork& w,
                                                int tid, int tile_start) {
  const PrefillParams& p = a.p;
  BoxCoord c{false, true, 0, -1};
  if (tid >= kv_tile) return c;
  const int t = tile_start + tid;
  c.owner = tid % a.box_rows == 0;
  if (p.kv_indices == nullptr) {
    const long long row = (long long)w.kv_first + t;
    c.key_ok = row < w.kv_end;
    c.slot = int(row);
    c.page = 0;
    return c;
  }
  const long long gi = (long long)w.kv_first + t / p.page_size;
  const int page = gi < w.kv_end ? __ldg(p.kv_indices + gi) : -1;
  c.key_ok = page >= 0 && page < p.num_pages;
  c.page = c.key_ok ? page : -1;
  c.slot = t % p.page_size;
  return c;
}

// TMA tiles: the owner's boxes of K (or V) for its box_rows keys into the stage at `dst`, counted
// on `bar`'s transaction count before they are issued.
template <int head_dim, int kv_tile>
KJIT_DEVICE KJIT_FORCEINLINE void issue_boxes(const PrefillSm90Params& a, const TmaDescriptor& map,
                                              const BoxCoord& c, int h, int tid, unsigned char* dst,
                                              u64* bar) {
  if (!c.owner) return;
  hopper::mbarrier_expect_tx(bar, u32(a.box_rows) * head_dim * 2);
  const int x1 = a.slot_major ? c.slot : h, x2 = a.slot_major ? h : c.slot;
#pragma unroll
  for (int b = 0; b < head_dim / 64; ++b) {
    hopper::tma_load_4d(dst + b * (kv_tile * 128) + tid * 128, &map, bar, b * 64, x1, x2, c.page);
  }
}

// The cp.async path for every tile (no TMA maps): K of tile i, then V of tile i - 1 published,
// V of tile i, then K of tile i published; Q rides with the first K tile's copies. it0: the
// ring's stages used before this CTA tile's first (a persistent CTA's earlier tiles), so the
// stages and their barriers' phases run on.
template <typename dtype, int head_dim, int kv_tile, int stages>
KJIT_DEVICE void produce_cp_async(const PrefillParams& p, const PrefillWork& w, int h, int tid,
                                  int first_tile, int end_tile, unsigned char* k_s,
                                  unsigned char* v_s, PrefillRing<kv_tile, stages>& ring,
                                  int it0 = 0) {
  constexpr int kTileBytes = kv_tile * head_dim * 2;
  for (int t = first_tile; t < end_tile; ++t) {
    const int i = t - first_tile, g = it0 + i, s = g % stages;
    const u32 parity = ((g / stages) & 1) ^ 1;
    hopper::mbarrier_wait(&ring.empty_k[s], parity);
    look_up_keys(p, w, h, tid, t * kv_tile, s, g & 1, ring);
    copy_rows<dtype, head_dim, kv_tile>(p.k, ring.k_off[g & 1], tid, k_s + s * kTileBytes);
    cp_async_commit();
    if (i > 0) {
      // V of the tile before landed (all but the newest group), visible to the async proxy.
      cp_async_wait<1>();
      hopper::fence_proxy_async_smem();
      hopper::mbarrier_arrive(&ring.full_v[(g - 1) % stages]);
    }
    hopper::mbarrier_wait(&ring.empty_v[s], parity);
    copy_rows<dtype, head_dim, kv_tile>(p.v, ring.v_off[g & 1], tid, v_s + s * kTileBytes);
    cp_async_commit();
    cp_async_wait<1>();
    hopper::fence_proxy_async_smem();
    hopper::mbarrier_arrive(&ring.full_k[s]);
  }
  cp_async_wait<0>();
  hopper::fence_proxy_async_smem();
  hopper::mbarrier_arrive(&ring.full_v[(it0 + end_tile - 1 - first_tile) % stages]);
}

// fp8 e4m3 keys and values (kv_fp8): each key's row is copied by cp.async, 16 e4m3 bytes a copy,
// into a raw staging tile (kv_tile x head_dim bytes, row-major), then converted by the same
// thread into the stage's 16-bit swizzled layout (fp16 * 2^-8, exact, as prefill.cuh's fp8 path:
// the host folds 2^8 into the score and v scales; by the hardware conversion, which leaves the
// consumers more of the SM's issue slots than the bit moves). The copy and the conversion map each
// thread to the same chunks, so a thread's cp.async wait is all its conversion needs (no barrier),
// and the conversion's plain stores reach the tensor cores through the fence before the full
// arrive.

// Thread tid's (row, 16-byte chunk) pairs of a raw e4m3 tile, the same for the copy and the
// conversion.
template <int head_dim, int kv_tile, typename F>
KJIT_DEVICE KJIT_FORCEINLINE void for_raw_chunks(int tid, F f) {
  constexpr int kChunks = head_dim / 16;
  constexpr int kRowsPerPass = 128 / kChunks;
#pragma unroll 4
  for (int r = tid / kChunks; r < kv_tile; r += kRowsPerPass) f(r, tid % kChunks);
}

template <int head_dim, int kv_tile>
KJIT_DEVICE KJIT_FORCEINLINE void copy_raw_fp8(const void* base, const long long* off, int tid,
                                               unsigned char* raw) {
  for_raw_chunks<head_dim, kv_tile>(tid, [&](int r, int ch) {
    const long long o = off[r];
    const unsigned char* src = static_cast<const unsigned char*>(base) + (o < 0 ? 0 : o) + ch * 16;
    cp_async<16>(smem_addr(raw + r * head_dim + ch * 16), src, o < 0 ? 0 : 16);
  });
}

template <int head_dim, int kv_tile>
KJIT_DEVICE KJIT_FORCEINLINE void convert_raw_fp8(const unsigned char* raw, int tid,
                                                  unsigned char* dst) {
  for_raw_chunks<head_dim, kv_tile>(tid, [&](int r, int ch) {
    const uint4 x = *reinterpret_cast<const uint4*>(raw + r * head_dim + ch * 16);
    uint4 lo, hi;
    e4m3x4_to_half2x2_scaled_cvt(x.x, lo.x, lo.y);
    e4m3x4_to_half2x2_scaled_cvt(x.y, lo.z, lo.w);
    e4m3x4_to_half2x2_scaled_cvt(x.z, hi.x, hi.y);
    e4m3x4_to_half2x2_scaled_cvt(x.w, hi.z, hi.w);
    *reinterpret_cast<uint4*>(dst + sw128_offset<kv_tile>(r, 2 * ch)) = lo;
    *reinterpret_cast<uint4*>(dst + sw128_offset<kv_tile>(r, 2 * ch + 1)) = hi;
  });
}

// The fp8 path for every tile (no TMA: the boxes would land e4m3 where the MMAs read fp16): as
// produce_cp_async, K of tile i copied raw, then V of tile i - 1 converted and published, V of
// tile i copied raw, then K of tile i converted and published. One raw tile each for K and V:
// each is converted before the next copy into it (by the thread that copies into it). Q rides
// with the first K tile's copies (cp.async), or was stored converted (produce_q).
template <int head_dim, int kv_tile, int stages>
KJIT_DEVICE void produce_fp8(const PrefillParams& p, const PrefillWork& w, int h, int tid,
                             int first_tile, int end_tile, unsigned char* k_s, unsigned char* v_s,
                             unsigned char* raw_k, unsigned char* raw_v,
                             PrefillRing<kv_tile, stages>& ring, int it0 = 0) {
  constexpr int kTileBytes = kv_tile * head_dim * 2;
  if (first_tile >= end_tile) return;
  const auto publish_v = [&](int g) {
    const int s = g % stages;
    hopper::mbarrier_wait(&ring.empty_v[s], ((g / stages) & 1) ^ 1);
    convert_raw_fp8<head_dim, kv_tile>(raw_v, tid, v_s + s * kTileBytes);
    hopper::fence_proxy_async_smem();
    hopper::mbarrier_arrive(&ring.full_v[s]);
  };
  for (int t = first_tile; t < end_tile; ++t) {
    const int i = t - first_tile, g = it0 + i, s = g % stages;
    hopper::mbarrier_wait(&ring.empty_k[s], ((g / stages) & 1) ^ 1);
    look_up_keys(p, w, h, tid, t * kv_tile, s, g & 1, ring);
    copy_raw_fp8<head_dim, kv_tile>(p.k, ring.k_off[g & 1], tid, raw_k);
    cp_async_commit();
    if (i > 0) {
      cp_async_wait<1>();  // V of the tile before (all but the newest group)
      publish_v(g - 1);
    }
    copy_raw_fp8<head_dim, kv_tile>(p.v, ring.v_off[g & 1], tid, raw_v);
    cp_async_commit();
    cp_async_wait<1>();  // K of this tile (and Q's copies with the first)
    convert_raw_fp8<head_dim, kv_tile>(raw_k, tid, k_s + s * kTileBytes);
    hopper::fence_proxy_async_smem();
    hopper::mbarrier_arrive(&ring.full_k[s]);
  }
  cp_async_wait<0>();
  publish_v(it0 + end_tile - 1 - first_tile);
}

// The TMA path: boxes for every tile below kv_len, the cp.async copies (waited for at once) for
// the one that reaches past it. Q's copies are waited for before the first K tile is published.
// it0 as produce_cp_async's.
template <typename dtype, int head_dim, int kv_tile, int stages>
KJIT_DEVICE void produce_tma(const PrefillSm90Params& a, const PrefillWork& w, int h, int tid,
                             int first_tile, int end_tile, unsigned char* k_s, unsigned char* v_s,
                             PrefillRing<kv_tile, stages>& ring, int it0 = 0) {
  constexpr int kTileBytes = kv_tile * head_dim * 2;
  cp_async_commit();  // Q
  for (int t = first_tile; t < end_tile; ++t) {
    const int i = t - first_tile, g = it0 + i, s = g % stages;
    const u32 parity = ((g / stages) & 1) ^ 1;
    unsigned char* k_dst = k_s + s * kTileBytes;
    unsigned char* v_dst = v_s + s * kTileBytes;
    hopper::mbarrier_wait(&ring.empty_k[s], parity);
    if ((long long)(t + 1) * kv_tile <= w.kv_len) {
      const BoxCoord c = box_coord<kv_tile>(a, w, tid, t * kv_tile);
      mark_key(ring, s, tid, c.key_ok);
      issue_boxes<head_dim, kv_tile>(a, a.k_map, c, h, tid, k_dst, &ring.full_k[s]);
      if (i == 0) {
        cp_async_wait<0>();
        hopper::fence_proxy_async_smem();
      }
      hopper::mbarrier_arrive(&ring.full_k[s]);
      hopper::mbarrier_wait(&ring.empty_v[s], parity);
      issue_boxes<head_dim, kv_tile>(a, a.v_map, c, h, tid, v_dst, &ring.full_v[s]);
      hopper::mbarrier_arrive(&ring.full_v[s]);
    } else {
      look_up_keys(a.p, w, h, tid, t * kv_tile, s, g & 1, ring);
      copy_rows_now<dtype, head_dim, kv_tile>(a.p.k, ring.k_off[g & 1], tid, k_dst,
                                              &ring.full_k[s]);
      hopper::mbarrier_wait(&ring.empty_v[s], parity);
      copy_rows_now<dtype, head_dim, kv_tile>(a.p.v, ring.v_off[g & 1], tid, v_dst,
                                              &ring.full_v[s]);
    }
  }
}

}  // namespace attention
}  // namespace kjit
