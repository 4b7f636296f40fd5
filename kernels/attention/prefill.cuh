// Batch prefill / append attention: ragged queries (qo_indptr) over a paged KV cache (the decode
// page table) or over packed ragged keys and values (kv_indptr in rows), FlashAttention-2 style
// on mma.sync m16n8k16 (sm_80+). The Hopper kernel (TMA + wgmma) is a second variant beside it.
//
// For request b, qo head i (kv head h = i / group) and query token qi of its q_len new tokens over
// kv_len keys (the new tokens are the last q_len of them):
//   keys j in [0, kv_len), with causal j <= kv_len - q_len + qi, with a window also
//   j >= kv_len - q_len + qi - window_left
//   logit_j = sm_scale * k_scale * (q . k_j)            (or cap * tanh(that / cap))
//   out = v_scale * sum_j softmax(logit)_j v_j,  lse = log(sum_j exp(logit_j))  (natural log)
// No key: out = 0, lse = -inf (decode's convention, so kjit_merge_states combines the two).
//
// Design: one CTA owns kRows = 16 x warps rows of one (request, kv head): the rows are (token,
// group member) pairs, token-major, so the query heads of a GQA group share every K / V tile
// they load (FlashInfer's packed GQA). Each warp owns 16 rows. K and V tiles of kv_tile keys
// stream through two shared-memory stages with cp.async, the next tile's copies in flight while
// the tensor cores work on this one: S = Q K^T, then an online softmax in fp32 (exp2, logits
// pre-scaled by log2e), then O += P V with P taken from S's accumulators as the A operand without
// a shuffle (the m16n8k16 C and A layouts line up). Tiles past the causal diagonal or before the
// window are never loaded; only tiles that cross a boundary evaluate the mask per element.
//
// fp8 e4m3 keys and values (kv_fp8 = 1): the MMAs run in fp16 (mma_dtype __half), Q converted on
// its load and each K / V row converted as decode does (e4m3x4_to_half2x2_scaled: v * 2^-8,
// exact; the host folds 2^8 into score_scale and v_scale). Those rows are read by plain loads and
// stored converted, not by cp.async, so this path is correct everywhere but does not overlap its
// loads with the MMAs as the 16-bit one does; the Hopper kernel's fp8 form (prefill_sm90.cuh,
// produce_fp8) copies them raw by cp.async and converts them in shared memory.
#pragma once

#include "attention/attention_params.h"
#include "attention/merge_states.cuh"  // kLn2
#include "common/mma_sm80.cuh"
#include "common/prelude.cuh"

namespace kjit {
namespace attention {

// The CTA's work: request b, its rows and keys, and the packed rows [m0, m0 + kRows) it owns.
struct PrefillWork {
  int b;
  int m0;
  int q_begin, q_len;  // the request's rows of q (clamped to [0, total_q))
  int kv_len;
  int kv_first;  // paged: the request's first entry of kv_indices; ragged: its first row of k / v
  int kv_end;    // paged: min(kv_indptr[b + 1], nnz_pages); ragged: the rows of k / v
};

// The rows of q request b owns, clamped to q's rows, from a pair of qo_indptr values.
KJIT_DEVICE KJIT_FORCEINLINE void q_range(const PrefillParams& p, int lo, int hi, int& begin,
                                          int& len) {
  begin = lo < 0 ? 0 : (lo > p.total_q ? p.total_q : lo);
  const int end = hi > p.total_q ? p.total_q : hi;
  len = end > begin ? end - begin : 0;
}

// The CTA's (tile, kv head) in a grid of tiles x kv_heads CTAs, in one of two orders (the plan's
// choice, prefill_plan.cpp):
//   head_inner = 1: every head's tile of one row band starts together, so every head's longest
//     tiles (find_work: last tile first) start before any head's short ones. Where the grid is a
//     few waves this keeps short CTAs of one head from waiting behind long ones of the next (2k
//     causal: 9% faster on an H100);
//   head_inner = 0: the heads one after another, each from its longest tile to its shortest: the
//     CTAs running at once share one head's keys in L2 (8k and the ragged batch: 1-2% faster).
struct PrefillCta {
  int work, h;
};
// `index` is the CTA's (blockIdx.x), or a persistent CTA's item, in [0, tiles x kv_heads).
KJIT_DEVICE KJIT_FORCEINLINE PrefillCta prefill_cta(const PrefillParams& p, unsigned index) {
  const unsigned heads = unsigned(p.kv_heads);
  if (p.head_inner) {
    const unsigned work = index / heads;
    return {int(work), int(index - work * heads)};
  }
  const unsigned tiles = unsigned(p.tiles);
  const unsigned h = index / tiles;
  return {int(index - h * tiles), int(h)};
}

// find_work's first half, run by one warp: the request of tile `work` and its tile within it
// into shared[0] (-1: none) and shared[1].
template <int rows>
KJIT_DEVICE KJIT_FORCEINLINE void locate_work(const PrefillParams& p, int work, int* shared) {
  const int lane = int(threadIdx.x) & 31;
  long long before = 0;  // tiles of the requests before this chunk
  shared[0] = -1;
  for (int base = 0; base < p.batch; base += 32) {
    const int b = base + lane;
    int tiles = 0;
    if (b < p.batch) {
      int begin, len;
      q_range(p, __ldg(p.qo_indptr + b), __ldg(p.qo_indptr + b + 1), begin, len);
      tiles = (len * p.group + rows - 1) / rows;
    }
    int incl = tiles;  // inclusive prefix over the lanes
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int x = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += x;
    }
    const unsigned hit = __ballot_sync(0xffffffffu, b < p.batch && work < before + incl);
    if (hit != 0) {
      const int l = __ffs(hit) - 1;
      if (lane == l) {
        shared[0] = b;
        shared[1] = tiles - 1 - (work - (before + incl - tiles));  // last tile first
      }
      break;
    }
    before += __shfl_sync(0xffffffffu, incl, 31);
  }
}

// find_work's second half: the request and rows locate_work left in `shared`, read by every
// thread after the barrier that published them.
template <int rows>
KJIT_DEVICE KJIT_FORCEINLINE bool read_work(const PrefillParams& p, const int* shared,
                                            PrefillWork& w) {
  w.b = shared[0];
  if (w.b < 0) return false;
  w.m0 = shared[1] * rows;
  q_range(p, __ldg(p.qo_indptr + w.b), __ldg(p.qo_indptr + w.b + 1), w.q_begin, w.q_len);
  const int first = __ldg(p.kv_indptr + w.b), last = __ldg(p.kv_indptr + w.b + 1);
  long long len = 0;
  if (p.kv_indices != nullptr) {
    // The decode rules: pages [first, last), the last one holding kv_last_page_len (clamped).
    if (first >= 0 && last > first) {
      const int lpl = __ldg(p.kv_last_page_len + w.b);
      const int lp = lpl < 0 ? 0 : (lpl < p.page_size ? lpl : p.page_size);
      len = (long long)(last - first - 1) * p.page_size + lp;
    }
    w.kv_end = last < p.nnz_pages ? last : p.nnz_pages;
  } else {
    if (first >= 0 && last > first) len = last - first;
    w.kv_end = int(p.num_pages < 0x7fffffffLL ? p.num_pages : 0x7fffffffLL);
  }
  w.kv_len = int(len > 0x7fffffffLL ? 0x7fffffffLL : len);
  w.kv_first = first;
  return true;
}

// Finds the request of CTA tile `work`: request b has ceil(q_len * group / rows) tiles, in request
// order. Warp 0 scans qo_indptr 32 requests at a time (a prefix sum of the tile counts per
// step); the other warps wait at the barrier. Later tiles of a request have more keys under a
// causal mask, so a request's tiles run last tile first. Returns false when `work` is past the
// last tile (a page table that shrank since the plan).
template <int rows>
KJIT_DEVICE bool find_work(const PrefillParams& p, int work, PrefillWork& w, int* shared) {
  if (threadIdx.x < 32) locate_work<rows>(p, work, shared);
  __syncthreads();
  return read_work<rows>(p, shared, w);
}

// The key tiles of a CTA's rows [m0, m0 + rows): from the window's start for its first row to the
// diagonal of its last, and the keys [full_lo, full_hi) every one of its rows sees, so tiles
// inside them skip the per-element mask.
struct TileRange {
  int first, end;
  long long full_lo, full_hi;
  // Whether the tile starting at key `start` needs the per-element mask.
  KJIT_DEVICE KJIT_FORCEINLINE bool masked(long long start, int kv_tile) const {
    return start + kv_tile > full_hi || start < full_lo;
  }
};

template <int rows, int kv_tile>
KJIT_DEVICE KJIT_FORCEINLINE TileRange tile_range(const PrefillParams& p, const PrefillWork& w) {
  const int q_rows = w.q_len * p.group;
  const int last_row = (w.m0 + rows < q_rows ? w.m0 + rows : q_rows) - 1;
  const long long delta = (long long)w.kv_len - w.q_len;
  long long kv_hi = w.kv_len, kv_lo = 0;
  if (p.causal) {
    const long long d = delta + last_row / p.group + 1;
    kv_hi = d < kv_hi ? d : kv_hi;
  }
  if (p.window_left >= 0) {
    const long long d = delta + w.m0 / p.group - p.window_left;
    kv_lo = d > 0 ? d : 0;
  }
  TileRange r;
  r.first = int(kv_lo / kv_tile);
  r.end = kv_hi > kv_lo ? int((kv_hi + kv_tile - 1) / kv_tile) : r.first;
  r.full_hi = p.causal ? delta + w.m0 / p.group + 1 : w.kv_len;
  r.full_lo = p.window_left >= 0 ? delta + last_row / p.group - p.window_left : 0;
  return r;
}

// The element offsets of key t's K and V rows (the CTA's kv head included), or false when the
// page table gives no valid row for it (such keys contribute nothing).
KJIT_DEVICE KJIT_FORCEINLINE bool key_row(const PrefillParams& p, const PrefillWork& w, int h,
                                          int t, long long& k_off, long long& v_off) {
  if (p.kv_indices == nullptr) {
    const long long row = (long long)w.kv_first + t;
    if (row >= w.kv_end) return false;
    k_off = row * p.k_ss + h * p.k_sh;
    v_off = row * p.v_ss + h * p.v_sh;
    return true;
  }
  const long long gi = (long long)w.kv_first + t / p.page_size;
  if (gi >= w.kv_end) return false;
  const int page = __ldg(p.kv_indices + gi);
  if (page < 0 || page >= p.num_pages) return false;
  const int slot = t % p.page_size;
  k_off = page * p.k_sp + slot * p.k_ss + h * p.k_sh;
  v_off = page * p.v_sp + slot * p.v_ss + h * p.v_sh;
  return true;
}

// Shared memory of one CTA in bytes (the host computes the same figure in prefill_smem_bytes):
// the Q tile, then two stages of K and V tiles, rows of head_dim 16-bit values, swizzled.
template <int head_dim, int warps, int kv_tile>
struct PrefillSmem {
  static constexpr int kRowBytes = head_dim * 2;
  static constexpr int kQAt = 0;
  static constexpr int kKAt = 16 * warps * kRowBytes;
  static constexpr int kVAt = kKAt + 2 * kv_tile * kRowBytes;
  static constexpr int kTotal = kVAt + 2 * kv_tile * kRowBytes;
};

// The rows [m0, m0 + 16 x warps) of the Q tile into shared memory (cp.async; rows past the
// request's are zero).
// mma_dtype other than dtype (the fp8-KV path's fp16 MMAs): each chunk is read, converted and
// stored instead.
template <typename dtype, int head_dim, int warps, typename mma_dtype = dtype>
KJIT_DEVICE KJIT_FORCEINLINE void load_q_tile(const PrefillParams& p, const PrefillWork& w, int h,
                                              unsigned char* q_s) {
  constexpr int kRowBytes = head_dim * 2, kChunks = head_dim / 8, kRows = 16 * warps;
  constexpr bool kConvert = !IsSame<dtype, mma_dtype>::value;
  const int q_rows = w.q_len * p.group;
  for (int i = int(threadIdx.x); i < kRows * kChunks; i += 32 * warps) {
    const int r = i / kChunks, ch = i % kChunks;
    const int m = w.m0 + r;
    const dtype* src = static_cast<const dtype*>(p.q);
    int bytes = 0;
    if (m < q_rows) {
      const int qi = m / p.group;
      src += (long long)(w.q_begin + qi) * p.q_sn +
             (long long)(h * p.group + m % p.group) * p.q_sh + ch * 8;
      bytes = 16;
    }
    if constexpr (kConvert) {
      uint4 x = make_uint4(0u, 0u, 0u, 0u);
      if (bytes != 0) x = *reinterpret_cast<const uint4*>(src);
      u32 in[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const dtype* v = reinterpret_cast<const dtype*>(&in[e]);
        in[e] = pack2<mma_dtype>(to_float(v[0]), to_float(v[1]));
      }
      *reinterpret_cast<uint4*>(q_s + swz<kRowBytes>(r, ch)) =
          make_uint4(in[0], in[1], in[2], in[3]);
    } else {
      cp_async<16>(smem_addr(q_s + swz<kRowBytes>(r, ch)), src, bytes);
    }
  }
}

// The copies of one K / V tile that fall to this thread: kThreadsPerRow threads share each of
// the tile's kv_tile rows, so a thread looks up one key per tile. A key without a valid row (or
// past kv_len) is zero-filled, so a masked value is 0, never a stale NaN.
template <int head_dim, int warps, int kv_tile>
struct KvLoader {
  static constexpr int kThreads = 32 * warps;
  static constexpr int kRowBytes = head_dim * 2;
  static constexpr int kChunks = head_dim / 8;
  static constexpr int kThreadsPerRow = kThreads / kv_tile;
  static constexpr int kCopies = kChunks / kThreadsPerRow;
  static_assert(kThreads % kv_tile == 0 && kChunks % kThreadsPerRow == 0,
                "a tile's rows must split evenly over the threads");

  int row, part;
  long long k_off = 0, v_off = 0;  // the next tile's row, looked up one tile ahead
  bool ok = false;

  KJIT_DEVICE KJIT_FORCEINLINE KvLoader() {
    row = int(threadIdx.x) / kThreadsPerRow;
    part = int(threadIdx.x) % kThreadsPerRow;
  }

  KJIT_DEVICE KJIT_FORCEINLINE void look_up(const PrefillParams& p, const PrefillWork& w, int h,
                                            int tile_start) {
    const int t = tile_start + row;
    ok = t < w.kv_len && key_row(p, w, h, t, k_off, v_off);
  }

  // Issues the copies of the tile looked up last into stage buffers k_s / v_s; returns whether
  // this thread's key has a valid row (keys past kv_len count as valid: the bound masks them).
  // kv_fp8: the row's e4m3 bytes (8 a chunk) are read now and stored as fp16 * 2^-8, so they are
  // in shared memory before the barrier that precedes the tile's use, as cp.async's would be.
  template <typename dtype, bool kv_fp8 = false>
  KJIT_DEVICE KJIT_FORCEINLINE void issue(const PrefillParams& p, unsigned char* k_s,
                                          unsigned char* v_s) const {
    if constexpr (kv_fp8) {
      const unsigned char* kp = static_cast<const unsigned char*>(p.k) + (ok ? k_off : 0);
      const unsigned char* vp = static_cast<const unsigned char*>(p.v) + (ok ? v_off : 0);
      uint2 kx[kCopies], vx[kCopies];
#pragma unroll
      for (int i = 0; i < kCopies; ++i) {
        const int ch = part + i * kThreadsPerRow;
        kx[i] = ok ? __ldg(reinterpret_cast<const uint2*>(kp + ch * 8)) : make_uint2(0u, 0u);
        vx[i] = ok ? __ldg(reinterpret_cast<const uint2*>(vp + ch * 8)) : make_uint2(0u, 0u);
      }
#pragma unroll
      for (int i = 0; i < kCopies; ++i) {
        const int ch = part + i * kThreadsPerRow;
        uint4 ky, vy;
        e4m3x4_to_half2x2_scaled(kx[i].x, ky.x, ky.y);
        e4m3x4_to_half2x2_scaled(kx[i].y, ky.z, ky.w);
        e4m3x4_to_half2x2_scaled(vx[i].x, vy.x, vy.y);
        e4m3x4_to_half2x2_scaled(vx[i].y, vy.z, vy.w);
        *reinterpret_cast<uint4*>(k_s + swz<kRowBytes>(row, ch)) = ky;
        *reinterpret_cast<uint4*>(v_s + swz<kRowBytes>(row, ch)) = vy;
      }
    } else {
      const dtype* kp = static_cast<const dtype*>(p.k) + (ok ? k_off : 0);
      const dtype* vp = static_cast<const dtype*>(p.v) + (ok ? v_off : 0);
      const int bytes = ok ? 16 : 0;
#pragma unroll
      for (int i = 0; i < kCopies; ++i) {
        const int ch = part + i * kThreadsPerRow;
        cp_async<16>(smem_addr(k_s + swz<kRowBytes>(row, ch)), kp + ch * 8, bytes);
        cp_async<16>(smem_addr(v_s + swz<kRowBytes>(row, ch)), vp + ch * 8, bytes);
      }
    }
  }
};

// The per-row key bounds of this thread's two rows (g and g + 8 of its warp's 16): keys
// [lo, hi) are attended. Rows past the request's get an empty range.
struct RowBounds {
  int lo[2], hi[2];
};

KJIT_DEVICE KJIT_FORCEINLINE RowBounds row_bounds(const PrefillParams& p, const PrefillWork& w,
                                                  int first_row) {
  RowBounds r;
  const int q_rows = w.q_len * p.group;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int m = w.m0 + first_row + 8 * j;
    long long lo = 0, hi = w.kv_len;
    if (m >= q_rows) {
      hi = 0;
    } else {
      const long long diag = (long long)w.kv_len - w.q_len + m / p.group;  // the row's own key
      if (p.causal) hi = diag + 1 < hi ? diag + 1 : hi;
      if (p.window_left >= 0 && diag - p.window_left > 0) lo = diag - p.window_left;
    }
    r.lo[j] = int(lo);
    r.hi[j] = int(hi < lo ? lo : hi);
  }
  return r;
}

// S = Q K^T for the warp's 16 rows and the tile's kv_tile keys: s[n][..] is the m16n8 C fragment
// of keys 8n..8n+7.
template <typename dtype, int head_dim, int kv_tile, bool q_in_regs>
KJIT_DEVICE KJIT_FORCEINLINE void qk_tile(const unsigned char* q_s, const unsigned char* k_s,
                                          const u32 (&qf)[q_in_regs ? head_dim / 16 : 1][4],
                                          int warp, int lane, float (&s)[kv_tile / 8][4]) {
  constexpr int kRowBytes = head_dim * 2;
#pragma unroll
  for (int n = 0; n < kv_tile / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
  }
#pragma unroll
  for (int ks = 0; ks < head_dim / 16; ++ks) {
    u32 a[4];
    if constexpr (q_in_regs) {
#pragma unroll
      for (int e = 0; e < 4; ++e) a[e] = qf[ks][e];
    } else {
      const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      ldmatrix_x4(a, smem_addr(q_s + swz<kRowBytes>(r, 2 * ks + (lane >> 4))));
    }
#pragma unroll
    for (int n2 = 0; n2 < kv_tile / 16; ++n2) {
      u32 b[4];  // keys 16 n2 .. + 7 (b[0], b[1]) and + 8 .. + 15 (b[2], b[3])
      const int key = n2 * 16 + (lane & 7) + (lane >> 4) * 8;
      ldmatrix_x4(b, smem_addr(k_s + swz<kRowBytes>(key, 2 * ks + ((lane >> 3) & 1))));
      mma_16816<dtype>(s[2 * n2], a, b[0], b[1]);
      mma_16816<dtype>(s[2 * n2 + 1], a, b[2], b[3]);
    }
  }
}

// The online softmax over one tile's logits (in place: s becomes p) and the running max and sum
// of this thread's two rows; alpha[j]: the factor row j's output so far must be scaled by.
// masked: evaluate the bounds (and the keys' validity) per element.
template <int kv_tile>
KJIT_DEVICE KJIT_FORCEINLINE void softmax_scores(const PrefillParams& p, float (&s)[kv_tile / 8][4],
                                                 bool masked, const RowBounds& rb,
                                                 const unsigned char* valid, int tile_start,
                                                 int lane, float (&m_run)[2], float (&l_run)[2],
                                                 float (&alpha)[2]) {
  const float kNegInf = -__int_as_float(0x7f800000);
  const int c = lane & 3;
  // The score scale (log2 e included) rides in the exponent's FFMA, exp2(x s - m) with m the
  // scaled running max, as FlashAttention-3 does: a multiply an element fewer than scaling the
  // tile first. The scale is > 0 (checked on the host), so the scaled max is the max scaled. The
  // soft cap and the mask are tested once per tile, outside the unrolled element loops: a test
  // per element made every element its own basic block, and the common tile (no cap, no mask)
  // paid two branches per score.
  float scale = p.score_scale;
  if (p.cap_out != 0.0f) {
#pragma unroll
    for (int n = 0; n < kv_tile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = p.cap_out * tanhf(s[n][e] * p.score_scale);
    }
    scale = 1.0f;
  }
  if (masked) {
#pragma unroll
    for (int n = 0; n < kv_tile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kl = n * 8 + 2 * c + (e & 1);
        const int key = tile_start + kl;
        const int j = e >> 1;
        if (key < rb.lo[j] || key >= rb.hi[j] || valid[kl] == 0) s[n][e] = kNegInf;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    float mx = kNegInf;
#pragma unroll
    for (int n = 0; n < kv_tile / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * j], s[n][2 * j + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m_run[j], mx * scale);
    const float m_use = m_new == kNegInf ? 0.0f : m_new;  // a row with no key yet: p = 0
    alpha[j] = ex2_approx(m_run[j] - m_use);
    float l = 0.0f;
#pragma unroll
    for (int n = 0; n < kv_tile / 8; ++n) {
      s[n][2 * j] = ex2_approx(fmaf(s[n][2 * j], scale, -m_use));
      s[n][2 * j + 1] = ex2_approx(fmaf(s[n][2 * j + 1], scale, -m_use));
      l += s[n][2 * j] + s[n][2 * j + 1];
    }
    l_run[j] = l_run[j] * alpha[j] + l;
    m_run[j] = m_new;
  }
}

// Scales the output accumulated so far by softmax_scores' alpha, row by row. Where no row of the
// warp saw its running max grow, every alpha is exactly 1 (ex2(0)) and the multiplies are skipped:
// past the first few tiles of a long row the max rarely moves, and the rescale is a multiply per
// output register per tile, a sixth of the softmax's instructions. The test is a warp vote, so
// the branch is uniform (all 32 lanes call this together).
template <int head_dim>
KJIT_DEVICE KJIT_FORCEINLINE void rescale_rows(const float (&alpha)[2],
                                               float (&o)[head_dim / 8][4]) {
  if (__all_sync(0xffffffffu, alpha[0] == 1.0f && alpha[1] == 1.0f)) return;
#pragma unroll
  for (int d = 0; d < head_dim / 8; ++d) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      o[d][2 * j] *= alpha[j];
      o[d][2 * j + 1] *= alpha[j];
    }
  }
}

// softmax_scores, then the output rescaled.
template <int head_dim, int kv_tile>
KJIT_DEVICE KJIT_FORCEINLINE void softmax_tile(const PrefillParams& p, float (&s)[kv_tile / 8][4],
                                               bool masked, const RowBounds& rb,
                                               const unsigned char* valid, int tile_start, int lane,
                                               float (&m_run)[2], float (&l_run)[2],
                                               float (&o)[head_dim / 8][4]) {
  float alpha[2];
  softmax_scores<kv_tile>(p, s, masked, rb, valid, tile_start, lane, m_run, l_run, alpha);
  rescale_rows<head_dim>(alpha, o);
}

// O += P V: the C fragments of keys 16 n2 .. + 15 are the A fragment of the product as they are.
template <typename dtype, int head_dim, int kv_tile>
KJIT_DEVICE KJIT_FORCEINLINE void pv_tile(const unsigned char* v_s,
                                          const float (&s)[kv_tile / 8][4], int lane,
                                          float (&o)[head_dim / 8][4]) {
  constexpr int kRowBytes = head_dim * 2;
#pragma unroll
  for (int n2 = 0; n2 < kv_tile / 16; ++n2) {
    u32 a[4];
    a[0] = pack2<dtype>(s[2 * n2][0], s[2 * n2][1]);
    a[1] = pack2<dtype>(s[2 * n2][2], s[2 * n2][3]);
    a[2] = pack2<dtype>(s[2 * n2 + 1][0], s[2 * n2 + 1][1]);
    a[3] = pack2<dtype>(s[2 * n2 + 1][2], s[2 * n2 + 1][3]);
    const int key = n2 * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int d2 = 0; d2 < head_dim / 16; ++d2) {
      u32 b[4];  // dims 16 d2 .. + 7 (b[0], b[1]) and + 8 .. + 15 (b[2], b[3])
      ldmatrix_x4_trans(b, smem_addr(v_s + swz<kRowBytes>(key, 2 * d2 + (lane >> 4))));
      mma_16816<dtype>(o[2 * d2], a, b[0], b[1]);
      mma_16816<dtype>(o[2 * d2 + 1], a, b[2], b[3]);
    }
  }
}

// The warp's rows out: O / l (times v_scale) and lse; rows past the request's are not written.
template <typename dtype, int head_dim>
KJIT_DEVICE KJIT_FORCEINLINE void store_rows(const PrefillParams& p, const PrefillWork& w, int h,
                                             int first_row, int lane, const float (&m_run)[2],
                                             const float (&l_run)[2],
                                             const float (&o)[head_dim / 8][4]) {
  const float kNegInf = -__int_as_float(0x7f800000);
  const int c = lane & 3;
  const int q_rows = w.q_len * p.group;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    float l = l_run[j];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int m = w.m0 + first_row + 8 * j;
    if (m >= q_rows) continue;
    const int qi = m / p.group;
    const int head = h * p.group + m % p.group;
    const float scale = l > 0.0f ? p.v_scale / l : 0.0f;
    dtype* dst = static_cast<dtype*>(p.out) + (long long)(w.q_begin + qi) * p.o_sn +
                 (long long)head * p.o_sh + 2 * c;
#pragma unroll
    for (int d = 0; d < head_dim / 8; ++d) {
      *reinterpret_cast<u32*>(dst + d * 8) =
          pack2<dtype>(o[d][2 * j] * scale, o[d][2 * j + 1] * scale);
    }
    if (c == 0 && p.lse != nullptr) {
      p.lse[(long long)(w.q_begin + qi) * p.lse_sn + (long long)head * p.lse_sh] =
          l > 0.0f ? (m_run[j] + __log2f(l)) * kLn2 : kNegInf;
    }
  }
}

// Launch contract: grid the plan's CTA tiles x num_kv_heads (prefill_cta), block 32 x warps,
// PrefillSmem::kTotal bytes of dynamic shared memory. q, k, v and out rows 16-byte aligned
// (strides multiples of 8 elements; fp8 k / v: of 16), out and lse not overlapping the inputs.
// kv_fp8 = 1: k and v are e4m3 and mma_dtype is __half (see the top of this file).
template <typename dtype, int head_dim, int warps, int kv_tile, typename mma_dtype = dtype,
          int kv_fp8 = 0>
__global__ void __launch_bounds__(32 * warps)
    prefill_kernel(const __grid_constant__ PrefillParams p) {
  static_assert(kv_fp8 == 0 || IsSame<mma_dtype, __half>::value,
                "fp8 keys and values run fp16 MMAs");
  using Smem = PrefillSmem<head_dim, warps, kv_tile>;
  using Loader = KvLoader<head_dim, warps, kv_tile>;
  constexpr int kRows = 16 * warps;
  constexpr int kTileBytes = kv_tile * head_dim * 2;
  // Q fragments stay in registers up to head_dim 128; at 256 they would take 64 registers
  // beside 128 of O, so the warps read them from shared memory each tile instead.
  constexpr bool kQInRegs = head_dim <= 128;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int work_s[2];
  __shared__ unsigned char valid_s[2][kv_tile];

  PrefillWork w;
  const PrefillCta cta = prefill_cta(p, blockIdx.x);
  if (!find_work<kRows>(p, cta.work, w, work_s)) return;
  const int h = cta.h;
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  unsigned char* q_s = smem + Smem::kQAt;
  unsigned char* k_s = smem + Smem::kKAt;
  unsigned char* v_s = smem + Smem::kVAt;

  const TileRange tr = tile_range<kRows, kv_tile>(p, w);
  const int first_tile = tr.first, end_tile = tr.end;

  const RowBounds rb = row_bounds(p, w, warp * 16 + (lane >> 2));
  float m_run[2] = {-__int_as_float(0x7f800000), -__int_as_float(0x7f800000)};
  float l_run[2] = {0.0f, 0.0f};
  float o[head_dim / 8][4];
#pragma unroll
  for (int d = 0; d < head_dim / 8; ++d) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[d][e] = 0.0f;
  }

  if (first_tile < end_tile) {
    Loader ld;
    load_q_tile<dtype, head_dim, warps, mma_dtype>(p, w, h, q_s);
    ld.look_up(p, w, h, first_tile * kv_tile);
    ld.template issue<dtype, kv_fp8 != 0>(p, k_s, v_s);
    bool mine_ok = ld.ok || first_tile * kv_tile + ld.row >= w.kv_len;
    if (ld.part == 0) valid_s[0][ld.row] = mine_ok ? 1 : 0;
    cp_async_commit();
    if (first_tile + 1 < end_tile) ld.look_up(p, w, h, (first_tile + 1) * kv_tile);
    u32 qf[kQInRegs ? head_dim / 16 : 1][4];

    for (int t = first_tile; t < end_tile; ++t) {
      const int stage = (t - first_tile) & 1;
      bool next_ok = true;
      if (t + 1 < end_tile) {
        // The other stage was last read by the tile before this one (a barrier ago).
        ld.template issue<dtype, kv_fp8 != 0>(p, k_s + (stage ^ 1) * kTileBytes,
                                              v_s + (stage ^ 1) * kTileBytes);
        next_ok = ld.ok || (t + 1) * kv_tile + ld.row >= w.kv_len;
        if (ld.part == 0) valid_s[stage ^ 1][ld.row] = next_ok ? 1 : 0;
      }
      cp_async_commit();
      if (t + 2 < end_tile) ld.look_up(p, w, h, (t + 2) * kv_tile);
      cp_async_wait<1>();
      const bool all_ok = __syncthreads_and(mine_ok) != 0;
      mine_ok = next_ok;
      if constexpr (kQInRegs) {
        if (t == first_tile) {
#pragma unroll
          for (int ks = 0; ks < head_dim / 16; ++ks) {
            const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            ldmatrix_x4(qf[ks], smem_addr(q_s + swz<head_dim * 2>(r, 2 * ks + (lane >> 4))));
          }
        }
      }
      const long long start = (long long)t * kv_tile;
      const bool masked = !all_ok || tr.masked(start, kv_tile);
      float s[kv_tile / 8][4];
      qk_tile<mma_dtype, head_dim, kv_tile, kQInRegs>(q_s, k_s + stage * kTileBytes, qf, warp, lane,
                                                      s);
      softmax_tile<head_dim, kv_tile>(p, s, masked, rb, valid_s[stage], int(start), lane, m_run,
                                      l_run, o);
      pv_tile<mma_dtype, head_dim, kv_tile>(v_s + stage * kTileBytes, s, lane, o);
      __syncthreads();
    }
  }
  store_rows<dtype, head_dim>(p, w, h, warp * 16 + (lane >> 2), lane, m_run, l_run, o);
}

}  // namespace attention
}  // namespace kjit
