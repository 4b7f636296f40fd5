// Paged decode attention: one query token per request against its paged K/V cache (FlashInfer's
// batch decode), grouped-query heads on tensor cores, split-KV across CTAs.
//
// For request b, kv head h and each query head j of its group (qo head h * group + j):
//   logit_t = sm_scale * k_scale * (q_j . k_t)           (or cap * tanh(that / cap))
//   out_j   = v_scale * sum_t softmax(logit)_t * v_t,  lse_j = log(sum_t exp(logit_t))
// over the request's positions t in [start, len): len = (pages - 1) * page_size + last_page_len,
// start = max(0, len - 1 - window_left) with a window, else 0.
//
// Design: decode reads every K/V byte once and does ~16 flops per byte, so
// the kernel is a bandwidth kernel that happens to use tensor cores. One CTA owns one (request,
// kv head, split) and streams its tokens through shared memory in stages of stage_tokens tokens
// with cp.async, `stages` deep, so each SM keeps ~100 KB of loads in flight. The page table is
// looked up per token row (any page size), one stage ahead of the loads, and the lookup's own
// global read one stage ahead of that.
//
// The products run transposed so that a GQA group (up to 8 heads per n-tile) is the mma's N
// dimension and 16 tokens its M: S^T = K Q^T and O^T += V^T P^T, m16n8k16. Nothing is padded
// for groups of 8 (or 16 with n_tiles = 2); P^T becomes the next B operand in registers through a
// warp-shuffle transpose. Each warp keeps its own online softmax over its tokens; the warps'
// states, then the splits' states (a second kernel), are merged with the MergeState math of
// merge_states.cuh.
#pragma once

#include "attention/attention_params.h"
#include "attention/merge_states.cuh"
#include "common/cluster.cuh"
#include "common/mma_sm80.cuh"
#include "common/prelude.cuh"

namespace kjit {
namespace attention {

// A request's token range and split count, read from the device page table. The plan's host
// copy only sizes things: whatever the table holds at run time, every token is covered (the
// last split takes what the planned chunks leave) and nothing is read out of bounds.
struct SeqSplit {
  int first;     // kv_indptr[b]
  int end_slot;  // min(kv_indptr[b + 1], nnz_pages)
  int len;
  int start;  // first position attended (the window's start)
  int splits;
};

// The page table's entries of request b, read in seq_load and interpreted in seq_split: the
// three loads are independent (b < batch always), so they cost one round trip, and a kernel can
// issue other loads between the two calls.
struct SeqRaw {
  int first, last, last_page_len;
};

KJIT_DEVICE KJIT_FORCEINLINE SeqRaw seq_load(const DecodeParams& p, int b) {
  return SeqRaw{__ldg(p.kv_indptr + b), __ldg(p.kv_indptr + b + 1), __ldg(p.kv_last_page_len + b)};
}

KJIT_DEVICE KJIT_FORCEINLINE SeqSplit seq_split(const DecodeParams& p, const SeqRaw& t) {
  SeqSplit r;
  long long len = 0;
  if (t.first >= 0 && t.last > t.first) {
    const int lp = t.last_page_len < 0 ? 0 : min(t.last_page_len, p.page_size);
    len = (long long)(t.last - t.first - 1) * p.page_size + lp;
    len = len > 0x7fffffffLL ? 0x7fffffffLL : len;
  }
  r.first = t.first;
  r.end_slot = t.last < p.nnz_pages ? t.last : p.nnz_pages;
  r.len = int(len);
  r.start = (p.window_left >= 0 && len - 1 - p.window_left > 0) ? int(len - 1 - p.window_left) : 0;
  const int eff = r.len - r.start;
  int splits = eff <= 0 ? 1 : (eff - 1) / p.chunk + 1;
  r.splits = splits < p.max_splits ? splits : p.max_splits;
  return r;
}

// What a stage's lookup buffers hold per token: the byte offsets of the row (page, slot, the
// CTA's first head) from the start of the K and V caches, 64-bit (addr 1) or 32-bit (addr 2: the
// host picks it when every row lies within 4 GB), computed once per token; a copy is then a load,
// an add to the cache pointer (a kernel parameter) and the cp.async. The form this replaced
// recomputed the address from (page, slot) in every copy, three 64-bit stride products per copy,
// and spent over half of its instructions there. All ones marks a masked row: a cp_bytes-aligned
// row never has an odd offset.
template <int addr>
struct __align__(8) DecodeRow {
  unsigned k, v;
};
template <>
struct __align__(16) DecodeRow<1> {
  long long k, v;
};

// Shared memory of one CTA, in bytes (the host computes the same figure in decode_smem_bytes).
// heads_per_cta kv heads share a CTA: their rows of one token are adjacent in an NHD cache, so a
// CTA reads heads_per_cta * head_dim * kv_bytes contiguous bytes per token instead of one head's
// row.
template <bool kv_fp8, int head_dim, int n_tiles, int warps, int stage_tokens, int stages,
          int heads_per_cta, int addr>
struct DecodeSmem {
  static constexpr int kKvBytes = kv_fp8 ? 1 : 2;
  static constexpr int kStageRow = head_dim * kKvBytes;  // bytes of one token row as stored
  static constexpr int kStageTile =
      heads_per_cta * stage_tokens * kStageRow;                // one of K or V for one stage
  static constexpr int kStageBytes = stages * 2 * kStageTile;  // all stages, K and V
  static constexpr int kConvTile =
      kv_fp8 ? heads_per_cta * stage_tokens * head_dim * 2 : 0;  // fp8 as fp16, K or V
  static constexpr int kQRows = 8 * n_tiles;                     // per head
  static constexpr int kQBytes = heads_per_cta * kQRows * head_dim * 2;
  static constexpr int kOffBufs = stages + 1;  // page lookups: see the main loop for why stages + 1
  static constexpr int kOffBytes = kOffBufs * stage_tokens * int(sizeof(DecodeRow<addr>));
  static constexpr int kConvAt = kStageBytes;
  static constexpr int kQAt = kConvAt + 2 * kConvTile;
  static constexpr int kOffAt = kQAt + kQBytes;
  static constexpr int kTotal = kOffAt + kOffBytes;
  // The final merge of the warps' states reuses the stage buffers.
  static constexpr int kORow =
      head_dim + 4;  // floats; the pad spreads the fragment stores over banks
  static constexpr int kScratch = warps * kQRows * kORow * 4 + 2 * warps * kQRows * 4;
  static_assert(kScratch <= kStageBytes, "merge scratch must fit in the stage buffers");
  // The cluster merge's partial ([heads_per_cta * kQRows][head_dim] floats, then their lse) follows
  // the scratch (the kernel asserts that it fits when it merges in a cluster; the host plans only
  // those).
  static constexpr int kCmAt = (kScratch + 15) / 16 * 16;
  static constexpr int kCmEnd = kCmAt + heads_per_cta * kQRows * (head_dim + 1) * 4;
};

// Folds kBatch split partials (lse in log2 units ls[u], normalized outputs x[u][0..N)) into a
// running state: m the largest lse so far, sum = sum_s 2^(lse_s - m), acc = sum_s 2^(lse_s - m)
// o_s; the output is acc / sum. Empty or absent partials carry lse = -inf and weigh 0; while
// every partial so far is empty the state stays (m = -inf, sum = 0). merge_states.cuh's math, a
// batch at a time: the merge kernel, the fused merge and the cluster merge all fold with it.
template <int kBatch, int N>
KJIT_DEVICE KJIT_FORCEINLINE void fold_partials(const float (&ls)[kBatch],
                                                const float (&x)[kBatch][N], float& m, float& sum,
                                                float (&acc)[N]) {
  float m_new = m;
#pragma unroll
  for (int u = 0; u < kBatch; ++u) m_new = fmaxf(m_new, ls[u]);
  if (m_new == -__int_as_float(0x7f800000)) return;
  const float alpha = exp2f(m - m_new);  // m = -inf: 0
  sum *= alpha;
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] *= alpha;
#pragma unroll
  for (int u = 0; u < kBatch; ++u) {
    const float w = exp2f(ls[u] - m_new);  // an empty or absent partial (-inf): 0
    sum += w;
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] += w * x[u][i];
  }
  m = m_new;
}

// The cluster merge of decode_kernel<..., cluster_merge = true>: every CTA of the cluster (one per
// split, idle ones holding empty partials) has left its partial output o[nh][head_dim] (normalized)
// and its lse (log2) in its own shared memory. After a cluster barrier each CTA finishes a 1 / C
// slice of the nh * head_dim outputs, reading the C partials of its slice from the other CTAs'
// shared memory (all loads at once: one distributed-shared-memory round trip), and a second barrier
// keeps every CTA resident until no other one reads it. The math is the merge kernel's.
template <typename q_dtype, int head_dim, int kThreads>
KJIT_DEVICE void decode_cluster_merge(const DecodeParams& p, float* cm_o, float* cm_lse, int nh,
                                      int b, int h, int rank) {
  const float kNegInf = -__int_as_float(0x7f800000);
  cluster_sync();
  const int C = int(cluster_size());
  const int total = nh * head_dim;
  const int per = (total + C - 1) / C;
  const int hi = min(rank * per + per, total);
  for (int i = rank * per + int(threadIdx.x); i < hi; i += kThreads) {
    const int k = i / head_dim;
    float ls[kDecodeClusterMax], xs[kDecodeClusterMax][1];
#pragma unroll
    for (int r = 0; r < kDecodeClusterMax; ++r) {
      ls[r] = kNegInf;
      xs[r][0] = 0.0f;
      if (r < C) {
        ls[r] = *cluster_map(cm_lse + k, u32(r));
        xs[r][0] = *cluster_map(cm_o + i, u32(r));
      }
    }
    float mx = kNegInf, tot = 0.0f, acc[1] = {0.0f};
    fold_partials(ls, xs, mx, tot, acc);
    const int d = i - k * head_dim;
    static_cast<q_dtype*>(p.out)[b * p.o_sb + (h * p.group + k) * p.o_sh + d] =
        from_float<q_dtype>(tot > 0.0f ? acc[0] / tot : 0.0f);
    if (d == 0 && p.lse != nullptr) {
      p.lse[b * p.lse_sb + (h * p.group + k) * p.lse_sh] =
          tot > 0.0f ? (mx + __log2f(tot)) * kLn2 : kNegInf;
    }
  }
  cluster_sync();
}

// fp8 rows of one stage -> fp16 (scaled by 2^-8) swizzled tiles, 16 fp8 values per thread and
// step; `rows` K and V rows.
template <int head_dim, int rows, int threads>
KJIT_DEVICE KJIT_FORCEINLINE void convert_fp8_stage(const unsigned char* kt,
                                                    const unsigned char* vt, unsigned char* kc,
                                                    unsigned char* vc, int tid) {
  constexpr int kRowCT = head_dim * 2;
  constexpr int kChunks = head_dim / 16;
  for (int it = tid; it < rows * kChunks; it += threads) {
    const int row = it / kChunks;
    const int ch = it % kChunks;
#pragma unroll
    for (int kv = 0; kv < 2; ++kv) {
      const uint4 x = *reinterpret_cast<const uint4*>((kv ? vt : kt) + row * head_dim + ch * 16);
      uint4 y0, y1;
      e4m3x4_to_half2x2_scaled(x.x, y0.x, y0.y);
      e4m3x4_to_half2x2_scaled(x.y, y0.z, y0.w);
      e4m3x4_to_half2x2_scaled(x.z, y1.x, y1.y);
      e4m3x4_to_half2x2_scaled(x.w, y1.z, y1.w);
      unsigned char* dst = kv ? vc : kc;
      *reinterpret_cast<uint4*>(dst + swz<kRowCT>(row, 2 * ch)) = y0;
      *reinterpret_cast<uint4*>(dst + swz<kRowCT>(row, 2 * ch + 1)) = y1;
    }
  }
}

// q rows of the CTA's heads into shared memory (zero rows past the group), as mma_dtype, swizzled.
template <typename q_dtype, typename mma_dtype, int head_dim, int heads_per_cta, int q_rows,
          int threads>
KJIT_DEVICE KJIT_FORCEINLINE void load_q(const DecodeParams& p, unsigned char* q_s, int b, int h,
                                         int tid) {
  constexpr int kRowCT = head_dim * 2;
#pragma unroll
  for (int i = tid; i < heads_per_cta * q_rows * head_dim / 2; i += threads) {
    const int jr = i / (head_dim / 2);  // q_s row: head jr / kQRows of the CTA, group member j
    const int j = jr % q_rows;
    const int d = (i % (head_dim / 2)) * 2;
    float x0 = 0.0f, x1 = 0.0f;
    if (j < p.group) {
      const q_dtype* qr = static_cast<const q_dtype*>(p.q) + b * p.q_sb +
                          ((h + jr / q_rows) * p.group + j) * p.q_sh;
      x0 = to_float(qr[d]);
      x1 = to_float(qr[d + 1]);
    }
    *reinterpret_cast<u32*>(q_s + swz<kRowCT>(jr, d >> 3) + (d & 7) * 2) = pack2<mma_dtype>(x0, x1);
  }
}

// Whether token t of the stage whose lookups start at o is attended.
template <typename Row>
KJIT_DEVICE KJIT_FORCEINLINE bool row_attended(const Row* o, int t) {
  return o[t].k != ~decltype(o[t].k)(0);
}

// One stage's tiles of this warp (head wh of the CTA, rank wi among its warps): S^T = K Q^T, the
// online softmax, O^T += V^T P^T, into the warp's running state (m_run, l_run, o_acc).
template <typename mma_dtype, int head_dim, int n_tiles, int stage_tokens, int q_rows,
          int tiles_per_warp, int joint_tiles, typename Row>
KJIT_DEVICE KJIT_FORCEINLINE void compute_stage(const DecodeParams& p, const unsigned char* q_s,
                                                const unsigned char* kt, const unsigned char* vt,
                                                const Row* o, int wh, int wi, int lane,
                                                float (&m_run)[n_tiles][2],
                                                float (&l_run)[n_tiles][2],
                                                float (&o_acc)[head_dim / 16][n_tiles][4]) {
  constexpr int kRowCT = head_dim * 2;
  constexpr int kKSteps = head_dim / 16;
  const float kNegInf = -__int_as_float(0x7f800000);
  const int g = lane >> 2;
#pragma unroll
  for (int tt = 0; tt < tiles_per_warp; tt += joint_tiles) {
    // joint_tiles tiles at once: their S^T chains are independent and share the q fragments, and
    // one online-softmax update (one max, one rescale of O) covers all of them.
    int r0[joint_tiles];  // each tile's first row in the K / V tiles
    bool ok_lo[joint_tiles], ok_hi[joint_tiles];
    bool any = false;
#pragma unroll
    for (int u = 0; u < joint_tiles; ++u) {
      const int t0 = (wi * tiles_per_warp + tt + u) * 16;  // the tile's first token of the stage
      r0[u] = wh * stage_tokens + t0;
      ok_lo[u] = row_attended(o, t0 + g);
      ok_hi[u] = row_attended(o, t0 + g + 8);
      any = any || ok_lo[u] || ok_hi[u];
    }
    if (!__any_sync(0xffffffffu, any)) continue;  // fully masked tiles

    // S^T = K Q^T: two accumulators (even / odd k-steps) halve the dependent mma chain.
    float s[joint_tiles][n_tiles][4], s2[joint_tiles][n_tiles][4];
#pragma unroll
    for (int u = 0; u < joint_tiles; ++u) {
#pragma unroll
      for (int nt = 0; nt < n_tiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[u][nt][e] = s2[u][nt][e] = 0.0f;
      }
    }
#pragma unroll
    for (int ks = 0; ks < kKSteps; ks += 2) {
      u32 qf[n_tiles][4];  // B fragments of k-steps ks (0, 1) and ks + 1 (2, 3)
#pragma unroll
      for (int nt = 0; nt < n_tiles; ++nt) {
        ldmatrix_x4(qf[nt], smem_addr(q_s + swz<kRowCT>(wh * q_rows + nt * 8 + (lane & 7),
                                                        2 * ks + (lane >> 3))));
      }
#pragma unroll
      for (int u = 0; u < joint_tiles; ++u) {
        const int krow = r0[u] + (lane & 7) + ((lane >> 3) & 1) * 8;
        u32 ka[4], kb[4];
        ldmatrix_x4(ka, smem_addr(kt + swz<kRowCT>(krow, 2 * ks + (lane >> 4))));
        ldmatrix_x4(kb, smem_addr(kt + swz<kRowCT>(krow, 2 * ks + 2 + (lane >> 4))));
#pragma unroll
        for (int nt = 0; nt < n_tiles; ++nt) {
          mma_16816<mma_dtype>(s[u][nt], ka, qf[nt][0], qf[nt][1]);
          mma_16816<mma_dtype>(s2[u][nt], kb, qf[nt][2], qf[nt][3]);
        }
      }
    }

    // Online softmax over these tiles' tokens (g: rows 0..7, g + 8: rows 8..15 of each).
    u32 pb[joint_tiles][n_tiles][2];
#pragma unroll
    for (int nt = 0; nt < n_tiles; ++nt) {
      float x[joint_tiles][4];
#pragma unroll
      for (int u = 0; u < joint_tiles; ++u) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = (s[u][nt][e] + s2[u][nt][e]) * p.score_scale;
          if (p.cap_out != 0.0f) v = p.cap_out * tanhf(v);
          x[u][e] = (e < 2 ? ok_lo[u] : ok_hi[u]) ? v : kNegInf;
        }
      }
      float pr[joint_tiles][4];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float mx = fmaxf(x[0][j], x[0][j + 2]);
#pragma unroll
        for (int u = 1; u < joint_tiles; ++u) mx = fmaxf(mx, fmaxf(x[u][j], x[u][j + 2]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        const float m_new = fmaxf(m_run[nt][j], mx);
        const float m_use = m_new == kNegInf ? 0.0f : m_new;
        const float alpha = exp2f(m_run[nt][j] - m_use);
        float l = l_run[nt][j] * alpha;
#pragma unroll
        for (int u = 0; u < joint_tiles; ++u) {
          pr[u][j] = exp2f(x[u][j] - m_use);
          pr[u][j + 2] = exp2f(x[u][j + 2] - m_use);
          l += pr[u][j] + pr[u][j + 2];
        }
        l_run[nt][j] = l;
        m_run[nt][j] = m_new;
#pragma unroll
        for (int mt = 0; mt < kKSteps; ++mt) {
          o_acc[mt][nt][j] *= alpha;
          o_acc[mt][nt][j + 2] *= alpha;
        }
      }
      // P^T as the B operand: transpose the two 8x8 (token, head) blocks of each tile.
#pragma unroll
      for (int u = 0; u < joint_tiles; ++u) {
        pb[u][nt][0] = transpose_8x8_b16(pack2<mma_dtype>(pr[u][0], pr[u][1]), lane);
        pb[u][nt][1] = transpose_8x8_b16(pack2<mma_dtype>(pr[u][2], pr[u][3]), lane);
      }
    }

    // O^T += V^T P^T.
#pragma unroll
    for (int mt = 0; mt < kKSteps; ++mt) {
#pragma unroll
      for (int u = 0; u < joint_tiles; ++u) {
        const int vrow = r0[u] + (lane & 7) + (lane >> 4) * 8;
        u32 va[4];
        ldmatrix_x4_trans(va, smem_addr(vt + swz<kRowCT>(vrow, 2 * mt + ((lane >> 3) & 1))));
#pragma unroll
        for (int nt = 0; nt < n_tiles; ++nt) {
          mma_16816<mma_dtype>(o_acc[mt][nt], va, pb[u][nt][0], pb[u][nt][1]);
        }
      }
    }
  }
}

// The warp's softmax state (max, sum, unnormalized O) into shared memory: so
// [warps][q_rows][o_row], sm and sl [warps][q_rows].
template <int head_dim, int n_tiles, int q_rows, int o_row>
KJIT_DEVICE KJIT_FORCEINLINE void store_warp_state(
    float* so, float* sm, float* sl, int warp, int lane, const float (&m_run)[n_tiles][2],
    const float (&l_run)[n_tiles][2], const float (&o_acc)[head_dim / 16][n_tiles][4]) {
  constexpr int kKSteps = head_dim / 16;
  const int g = lane >> 2;
  const int c = lane & 3;
#pragma unroll
  for (int nt = 0; nt < n_tiles; ++nt) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float l = l_run[nt][j];
      l += __shfl_xor_sync(0xffffffffu, l, 4);
      l += __shfl_xor_sync(0xffffffffu, l, 8);
      l += __shfl_xor_sync(0xffffffffu, l, 16);
      const int head = nt * 8 + 2 * c + j;
      if (g == 0) {
        sm[warp * q_rows + head] = m_run[nt][j];
        sl[warp * q_rows + head] = l;
      }
      float* row = so + (warp * q_rows + head) * o_row;
#pragma unroll
      for (int mt = 0; mt < kKSteps; ++mt) {
        row[mt * 16 + g] = o_acc[mt][nt][j];
        row[mt * 16 + g + 8] = o_acc[mt][nt][j + 2];
      }
    }
  }
}

// The CTA's outputs: each thread weighs the warps' states of one head for four adjacent dims and
// stores the result as out and lse (one split), as this CTA's partial in shared memory (cluster
// merge) or in the workspace (split-KV).
template <typename q_dtype, int head_dim, int heads_per_cta, int warps_per_head, int q_rows,
          int o_row, int threads, bool cluster_merge>
KJIT_DEVICE KJIT_FORCEINLINE void finish_heads(const DecodeParams& p, const float* so,
                                               const float* sm, const float* sl, float* cm_o,
                                               float* cm_lse, bool final_out, int nh,
                                               long long part, int b, int h, int tid) {
  const float kNegInf = -__int_as_float(0x7f800000);
  constexpr int kQuads = head_dim / 4;
  for (int i = tid; i < nh * kQuads; i += threads) {
    const int k = i / kQuads;
    const int d = (i - k * kQuads) * 4;
    const int hh = heads_per_cta == 1 ? 0 : k / p.group;
    const int j = k - hh * p.group;
    const int w0 = hh * warps_per_head;
    float mx = kNegInf;
#pragma unroll
    for (int w = 0; w < warps_per_head; ++w) mx = fmaxf(mx, sm[(w0 + w) * q_rows + j]);
    float tot = 0.0f;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < warps_per_head; ++w) {
      const int r = (w0 + w) * q_rows + j;
      const float wt = mx == kNegInf ? 0.0f : exp2f(sm[r] - mx);
      tot += wt * sl[r];
      const float4 x = *reinterpret_cast<const float4*>(so + r * o_row + d);
      acc.x += wt * x.x;
      acc.y += wt * x.y;
      acc.z += wt * x.z;
      acc.w += wt * x.w;
    }
    const float inv = tot > 0.0f ? p.v_scale / tot : 0.0f;
    acc.x *= inv;
    acc.y *= inv;
    acc.z *= inv;
    acc.w *= inv;
    const float lse2 = tot > 0.0f ? mx + __log2f(tot) : kNegInf;
    if (final_out) {
      // out rows need only element alignment: four scalar stores.
      q_dtype* dst = static_cast<q_dtype*>(p.out) + b * p.o_sb + (h * p.group + k) * p.o_sh + d;
      dst[0] = from_float<q_dtype>(acc.x);
      dst[1] = from_float<q_dtype>(acc.y);
      dst[2] = from_float<q_dtype>(acc.z);
      dst[3] = from_float<q_dtype>(acc.w);
      if (d == 0 && p.lse != nullptr) {
        p.lse[b * p.lse_sb + (h * p.group + k) * p.lse_sh] = lse2 * kLn2;
      }
    } else if constexpr (cluster_merge) {
      *reinterpret_cast<float4*>(cm_o + k * head_dim + d) = acc;
      if (d == 0) cm_lse[k] = lse2;
    } else {
      *reinterpret_cast<float4*>(p.ws_o + (part + k) * head_dim + d) = acc;
      if (d == 0) p.ws_lse[part + k] = lse2;
    }
  }
}

// The fused split merge: the last CTA of a (request, head set) to finish combines all its splits.
// The classic last-block pattern: every CTA makes its partial visible device-wide before its
// arrival is counted; the CTA that counts last fences again, then reads the others' partials
// from L2 (ld.cg: L1 is not coherent across SMs). It leaves the counter at zero for the next
// launch, which a CUDA graph replay relies on.
template <typename q_dtype, int head_dim, int threads>
KJIT_DEVICE KJIT_FORCEINLINE void fused_split_merge(const DecodeParams& p, int* flag, int splits,
                                                    int bh, int nh, int b, int h, int tid) {
  const float kNegInf = -__int_as_float(0x7f800000);
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    const int prev = atomicAdd(p.counters + bh, 1);
    const bool last = prev == splits - 1;
    if (last) atomicExch(p.counters + bh, 0);
    *flag = last ? 1 : 0;
  }
  __syncthreads();
  if (*flag == 0) return;  // whole CTA
  __threadfence();

  // Four dims of one head per thread. Each thread reads kBatch splits' lse and partials at once
  // and folds them into a running (max, sum, acc): one L2 round trip per kBatch splits, with no
  // separate pass for the lse and no barrier.
  constexpr int kBatch = 16;
  const long long base = (long long)b * p.max_splits * p.num_qo_heads + h * p.group;
  for (int i = tid; i < nh * (head_dim / 4); i += threads) {
    const int k = i / (head_dim / 4);
    const int d = (i - k * (head_dim / 4)) * 4;
    float m = kNegInf, tot = 0.0f, acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int s0 = 0; s0 < splits; s0 += kBatch) {
      float ls[kBatch];
      float x[kBatch][4];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const long long part_k = base + (long long)(s0 + u) * p.num_qo_heads + k;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        ls[u] = kNegInf;
        if (s0 + u < splits) {
          ls[u] = __ldcg(p.ws_lse + part_k);
          v = __ldcg(reinterpret_cast<const float4*>(p.ws_o + part_k * head_dim + d));
        }
        x[u][0] = v.x;
        x[u][1] = v.y;
        x[u][2] = v.z;
        x[u][3] = v.w;
      }
      fold_partials(ls, x, m, tot, acc);
    }
    const float inv = tot > 0.0f ? 1.0f / tot : 0.0f;
    q_dtype* dst = static_cast<q_dtype*>(p.out) + b * p.o_sb + (h * p.group + k) * p.o_sh + d;
#pragma unroll
    for (int i = 0; i < 4; ++i) dst[i] = from_float<q_dtype>(acc[i] * inv);
    if (d == 0 && p.lse != nullptr) {
      p.lse[b * p.lse_sb + (h * p.group + k) * p.lse_sh] =
          tot > 0.0f ? (m + __log2f(tot)) * kLn2 : kNegInf;
    }
  }
}

// Launch: grid = batch * (num_kv_heads / heads_per_cta) * max_splits (blockIdx.x = (b * kv_heads /
// heads_per_cta + h / heads_per_cta) * max_splits + split), block = 32 * warps, dynamic shared
// memory DecodeSmem<...>::kTotal bytes (opt-in above 48 KB). num_kv_heads must be a multiple of
// heads_per_cta; warps / heads_per_cta warps serve each head. Every K/V row (page, slot, head)
// address must be cp_bytes-byte aligned; q, out and lse need only element alignment. out and lse
// must not overlap the inputs. With max_splits > 1 the workspace partials are then combined by
// decode_merge_kernel, or, with p.counters set (zero before the first launch; the kernel leaves
// them zero), by the last CTA of each (request, head set) to finish: no second launch and no gap
// between the kernels. addr: see DecodeRow. joint_tiles: 16-token tiles a warp computes together
// (one softmax update for all, joint_tiles independent mma chains in flight). q_dtype: q / out
// type. mma_dtype: the mma operand type (q_dtype for a 16-bit cache, __half for fp8 e4m3, whose
// values enter scaled by 2^-8: the host folds 2^8 into score_scale and v_scale). cluster_merge
// (sm_90): the splits of a (request, head set) are one thread-block cluster (cluster size =
// max_splits <= 16) that merges its partials through distributed shared memory: no workspace, no
// second kernel.
// clang-format off
// The template parameters are DecodeConfig's fields (src/ops/attention), in the spec's order.
template <typename q_dtype, typename mma_dtype, bool kv_fp8, int head_dim, int n_tiles,
          int warps, int stage_tokens, int stages, int cp_bytes, int heads_per_cta, int addr,
          int joint_tiles, bool cluster_merge>
__global__ void __launch_bounds__(32 * warps)
decode_kernel(const __grid_constant__ DecodeParams p) {
  // clang-format on
  static_assert(head_dim == 64 || head_dim == 128 || head_dim == 256, "head_dim 64, 128 or 256");
  static_assert(n_tiles == 1 || n_tiles == 2, "up to two n-tiles of 8 heads");
  static_assert(heads_per_cta >= 1 && warps % heads_per_cta == 0,
                "every head of the CTA gets whole warps");
  constexpr int kWarpsPerHead = warps / heads_per_cta;
  static_assert(stage_tokens % (16 * kWarpsPerHead) == 0,
                "every warp takes whole 16-token tiles of a stage");
  static_assert(stage_tokens <= 32 * warps, "one page lookup per thread per stage");
  static_assert(stages >= 2, "at least double buffering");
  static_assert(cp_bytes == 16 || cp_bytes == 8 || cp_bytes == 4, "cp.async size");
  static_assert(addr == 1 || addr == 2, "lookups: 64- or 32-bit row offsets");
  using Smem =
      DecodeSmem<kv_fp8, head_dim, n_tiles, warps, stage_tokens, stages, heads_per_cta, addr>;
  static_assert(!cluster_merge || Smem::kCmEnd <= Smem::kStageBytes,
                "the cluster merge's partial must fit in the stage buffers");
  using Row = DecodeRow<addr>;
  constexpr int kThreads = 32 * warps;
  constexpr int kTilesPerWarp = stage_tokens / (16 * kWarpsPerHead);
  static_assert((joint_tiles == 1 || joint_tiles == 2) && kTilesPerWarp % joint_tiles == 0,
                "whole tile groups per warp");
  constexpr int kRowCT = head_dim * 2;  // bytes of a compute-type row (swizzled tiles)
  constexpr int kKSteps = head_dim / 16;
  const float kNegInf = -__int_as_float(0x7f800000);

  extern __shared__ __align__(16) unsigned char smem[];
  Row* offs = reinterpret_cast<Row*>(smem + Smem::kOffAt);  // [kOffBufs][stage_tokens]
  unsigned char* q_s = smem + Smem::kQAt;

  const int tid = int(threadIdx.x);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // A merge kernel launched as a programmatic dependent may start once every CTA here has: its
  // griddepcontrol.wait still waits for this grid to finish and flush. Without that launch
  // attribute this does nothing.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wh = warp / kWarpsPerHead;  // this warp's head within the CTA
  const int wi = warp % kWarpsPerHead;  // and its rank among that head's warps

  const int split = int(blockIdx.x % unsigned(p.max_splits));
  const int bh = int(blockIdx.x / unsigned(p.max_splits));
  const int head_sets = p.num_kv_heads / heads_per_cta;
  const int h = (bh % head_sets) * heads_per_cta;  // the CTA's first kv head
  const int b = bh / head_sets;

  // ---- Prologue, part 1: the page table's entries of the request and q, read together ------
  // (Measured on the H200: with the lookups the page ids wait for, the first page ids
  // arrived 2.1-2.3 us after entry, the first K / V bytes 2.4 us later; starting the page-id reads
  // at the plan's host kv_indptr[b], before the table confirmed it, gained nothing measurable.)
  const SeqRaw raw = seq_load(p, b);
  load_q<q_dtype, mma_dtype, head_dim, heads_per_cta, Smem::kQRows, kThreads>(p, q_s, b, h, tid);

  const SeqSplit sq = seq_split(p, raw);
  // Whole CTA, no barrier reached yet. Under cluster_merge a CTA past its request's splits stays,
  // idle, for its cluster's barriers, unless the request has one split (then no CTA of the cluster
  // reaches them: sq is the same in all).
  if (split >= sq.splits && (!cluster_merge || sq.splits == 1)) return;
  const int begin = sq.start + split * p.chunk;
  const int end = split == sq.splits - 1 ? sq.len : begin + p.chunk;
  const int n_stages = split < sq.splits && end > begin ? (end - begin - 1) / stage_tokens + 1 : 0;

  // The CTA's first head in the caches. Unused since the loads take row offsets from the lookups,
  // but kept: without these two lines the compiler orders the 16-bit-cache kernels' address
  // arithmetic differently and their machine code changes (checked on the catalog's cubins).
  [[maybe_unused]] const unsigned char* k_head =
      static_cast<const unsigned char*>(p.k_cache) + h * p.k_sh * Smem::kKvBytes;
  [[maybe_unused]] const unsigned char* v_head =
      static_cast<const unsigned char*>(p.v_cache) + h * p.v_sh * Smem::kKvBytes;

  // ---- Page lookups: this thread's token of a stage -> row offsets; all ones masks it ------
  // fetch starts the global read of the page id; publish (later: the read's latency is hidden)
  // validates it and stores it for the loads and the masks.
  struct Lookup {
    int page;  // raw kv_indices value (unvalidated)
    int slot;
    bool ok;
  };
  auto fetch = [&](int stage) {
    Lookup l{-1, 0, false};
    if (tid < stage_tokens && stage < n_stages) {
      const int pos = begin + stage * stage_tokens + tid;
      if (pos < end) {
        const int pidx = pos / p.page_size;
        l.slot = pos - pidx * p.page_size;
        const long long gi = (long long)sq.first + pidx;
        if (gi < sq.end_slot) {
          l.page = __ldg(p.kv_indices + gi);
          l.ok = true;
        }
      }
    }
    return l;
  };
  auto publish = [&](int stage, const Lookup& l) {
    if (tid < stage_tokens) {
      const bool ok = l.ok && l.page >= 0 && l.page < p.num_pages;
      Row r;
      using Off = decltype(r.k);
      r.k = r.v = ~Off(0);
      if (ok) {
        r.k = Off((l.page * p.k_sp + l.slot * p.k_ss + h * p.k_sh) * Smem::kKvBytes);
        r.v = Off((l.page * p.v_sp + l.slot * p.v_ss + h * p.v_sh) * Smem::kKvBytes);
      }
      offs[(stage % Smem::kOffBufs) * stage_tokens + tid] = r;
    }
  };

  // ---- Loads of one stage: stage_tokens rows of K and of V, cp_bytes bytes per cp.async
  // ------------------------ Byte offsets of head hh of the CTA from its first head.
  const long long k_hh = p.k_sh * Smem::kKvBytes, v_hh = p.v_sh * Smem::kKvBytes;
  auto issue = [&](int stage) {
    if (stage >= n_stages) return;
    const int buf = stage % stages;
    const Row* o = offs + (stage % Smem::kOffBufs) * stage_tokens;
    unsigned char* kd = smem + buf * 2 * Smem::kStageTile;
    unsigned char* vd = kd + Smem::kStageTile;
    constexpr int kPerRow = Smem::kStageRow / cp_bytes;
    static_assert((heads_per_cta * stage_tokens * kPerRow) % kThreads == 0,
                  "loads split evenly over the threads");
    constexpr int kIters = heads_per_cta * stage_tokens * kPerRow / kThreads;
    // Copy `col` (cp_bytes bytes) of head row rh = t * heads_per_cta + hh: consecutive threads walk
    // a token's heads_per_cta head rows in address order (adjacent in NHD); the tile keeps each
    // head's stage_tokens rows together for the mma.
    auto copy = [&](int rh, int col) {
      const int hh = rh % heads_per_cta;
      const int t = rh / heads_per_cta;
      const int row = hh * stage_tokens + t;
      const int byte = col * cp_bytes;
      const Row r = o[t];
      const bool ok = r.k != ~decltype(r.k)(0);
      // The offset and the column added in the offset's own width, then one add to the
      // cache pointer (a kernel parameter: uniform, never recomputed).
      using Off = decltype(r.k);
      const unsigned char* ks =
          static_cast<const unsigned char*>(p.k_cache) + ((ok ? r.k : Off(0)) + Off(byte));
      const unsigned char* vs =
          static_cast<const unsigned char*>(p.v_cache) + ((ok ? r.v : Off(0)) + Off(byte));
      if constexpr (heads_per_cta > 1) {
        ks += hh * k_hh;
        vs += hh * v_hh;
      }
      int at;
      if constexpr (kv_fp8) {
        at = row * Smem::kStageRow + byte;  // converted before use: no swizzle needed here
      } else {
        at = swz<kRowCT>(row, byte >> 4) + (byte & 15);
      }
      cp_async<cp_bytes>(smem_addr(kd + at), ks, ok ? cp_bytes : 0);
      cp_async<cp_bytes>(smem_addr(vd + at), vs, ok ? cp_bytes : 0);
    };
    if constexpr (kThreads % kPerRow == 0) {
      // A thread copies the same column of every kThreads / kPerRow-th row: its column, byte
      // offset and swizzle are loop invariants.
      constexpr int kRowStep = kThreads / kPerRow;
#pragma unroll(kIters <= 8 ? kIters : 4)
      for (int i = 0; i < kIters; ++i) copy(tid / kPerRow + i * kRowStep, tid % kPerRow);
    } else {
#pragma unroll 4
      for (int i = 0; i < kIters; ++i) {
        const int it = tid + i * kThreads;
        copy(it / kPerRow, it % kPerRow);
      }
    }
  };

  // ---- Prologue, part 2: the page ids of stages 0..stages-1, then the loads of 0..stages-2 ----
  Lookup first[stages];
#pragma unroll
  for (int st = 0; st < stages; ++st) first[st] = fetch(st);
#pragma unroll
  for (int st = 0; st < stages; ++st) publish(st, first[st]);
  __syncthreads();
  for (int st = 0; st < stages - 1; ++st) {
    issue(st);
    cp_async_commit();
  }
  Lookup next = fetch(stages);

  // ---- Per-warp online softmax state: heads 2c, 2c+1 of each n-tile ---------------------------
  float m_run[n_tiles][2], l_run[n_tiles][2];
  float o_acc[kKSteps][n_tiles][4];  // O^T: dims 16*mt + (g, g+8) x heads 8*nt + (2c, 2c+1)
#pragma unroll
  for (int nt = 0; nt < n_tiles; ++nt) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      m_run[nt][j] = kNegInf;
      l_run[nt][j] = 0.0f;
    }
#pragma unroll
    for (int mt = 0; mt < kKSteps; ++mt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o_acc[mt][nt][e] = 0.0f;
    }
  }

  // ---- Main loop ----------------------------------------------------------------------------
  // Iteration i: wait for stage i; issue stage i + stages - 1 (its lookups were published one
  // iteration earlier, and the barrier made them visible); publish the lookups of stage i + stages
  // from the registers loaded one iteration ago, and start the global reads for stage i + stages +
  // 1; compute stage i. The barrier also retires stage i - 1 (its buffer is the one refilled here)
  // and its lookups: with stages + 1 lookup buffers the one published here is stage i - 1's, while
  // this iteration reads only those of stages i (masks) and i + stages - 1 (loads).
  for (int i = 0; i < n_stages; ++i) {
    cp_async_wait<stages - 2>();
    __syncthreads();
    issue(i + stages - 1);
    cp_async_commit();  // possibly empty: keeps the group count in step with the stages
    publish(i + stages, next);
    next = fetch(i + stages + 1);

    const int buf = i % stages;
    const unsigned char* kt = smem + buf * 2 * Smem::kStageTile;
    const unsigned char* vt = kt + Smem::kStageTile;
    if constexpr (kv_fp8) {
      unsigned char* kc = smem + Smem::kConvAt;
      unsigned char* vc = kc + Smem::kConvTile;
      convert_fp8_stage<head_dim, heads_per_cta * stage_tokens, kThreads>(kt, vt, kc, vc, tid);
      __syncthreads();
      kt = kc;
      vt = vc;
    }

    const Row* o = offs + (i % Smem::kOffBufs) * stage_tokens;
    compute_stage<mma_dtype, head_dim, n_tiles, stage_tokens, Smem::kQRows, kTilesPerWarp,
                  joint_tiles>(p, q_s, kt, vt, o, wh, wi, lane, m_run, l_run, o_acc);
  }
  cp_async_wait<0>();
  __syncthreads();  // the stage buffers become the merge scratch

  // ---- Merge the warps' states -----------------------------------------------------------------
  float* so = reinterpret_cast<float*>(smem);           // [warps][kQRows][kORow]
  float* sm = so + warps * Smem::kQRows * Smem::kORow;  // [warps][kQRows] max (log2)
  float* sl = sm + warps * Smem::kQRows;                // [warps][kQRows] sum
  store_warp_state<head_dim, n_tiles, Smem::kQRows, Smem::kORow>(so, sm, sl, warp, lane, m_run,
                                                                 l_run, o_acc);
  __syncthreads();

  // Heads k = hh * group + j of the CTA (qo head h * group + k): the CTA's qo heads are adjacent.
  // A thread finishes four adjacent dims of one head and weighs the warps' states of that head
  // itself (four exp2f, redundant across the head's threads), so one barrier serves the whole
  // epilogue (measured on the H200: the per-head weights pass with its own barrier and a store loop
  // of single floats took 1.1 us of the latest CTA's 1.25 us epilogue).
  const bool final_out = sq.splits == 1;
  const int nh = heads_per_cta * p.group;
  // [nh][head_dim]: this CTA's partial (cluster_merge)
  float* cm_o = reinterpret_cast<float*>(smem + Smem::kCmAt);
  float* cm_lse = cm_o + heads_per_cta * Smem::kQRows * head_dim;  // [nh] its lse, log2
  const long long part = ((long long)b * p.max_splits + split) * p.num_qo_heads + h * p.group;
  finish_heads<q_dtype, head_dim, heads_per_cta, kWarpsPerHead, Smem::kQRows, Smem::kORow, kThreads,
               cluster_merge>(p, so, sm, sl, cm_o, cm_lse, final_out, nh, part, b, h, tid);
  if constexpr (cluster_merge) {
    if (!final_out) {
      decode_cluster_merge<q_dtype, head_dim, kThreads>(p, cm_o, cm_lse, nh, b, h, split);
    }
    return;
  }
  if (final_out || p.counters == nullptr) return;

  // ---- Fused split merge: the last CTA of this (request, head set) to finish combines all ------
  int* flag = reinterpret_cast<int*>(smem + Smem::kOffAt);  // the lookups are dead by now
  fused_split_merge<q_dtype, head_dim, kThreads>(p, flag, sq.splits, bh, nh, b, h, tid);
}

// Combines the split partials of decode_kernel: a block per (request, qo head), its four warps
// taking every fourth split, head_dim / 32 dims per lane. A warp reads kBatch splits' lse and
// partial outputs at once and folds them into a running (max, sum, acc) state, so the merge costs
// one L2 round trip per kBatch * 4 splits (one for the default 32-way split), not one for the lse
// and another for the partials. The math is merge_states.cuh's: out = sum_s 2^(lse_s - max) o_s /
// sum_s 2^(lse_s - max). Launch with grid = batch * num_qo_heads, block = 128, after
// decode_kernel on the same stream, with the same params. Requests that ran unsplit are skipped
// (decode_kernel wrote them).
template <typename q_dtype, int head_dim>
__global__ void __launch_bounds__(128) decode_merge_kernel(const __grid_constant__ DecodeParams p) {
  constexpr int kPer = head_dim / 32;
  constexpr int kWarps = 4;
  constexpr int kBatch = 8;
  __shared__ float s_acc[kWarps][head_dim];
  __shared__ float s_max[kWarps], s_sum[kWarps];
  const int lane = int(threadIdx.x) & 31;
  const int warp = int(threadIdx.x) >> 5;
  const int b = int(blockIdx.x / unsigned(p.num_qo_heads));
  const int qh = int(blockIdx.x - unsigned(b) * unsigned(p.num_qo_heads));
  // The page table is an input the split kernel does not write: reading it before the wait
  // overlaps that read with the split kernel's tail.
  const SeqSplit sq = seq_split(p, seq_load(p, b));
  const long long hs = p.num_qo_heads;
  const long long base = (long long)b * p.max_splits * hs + qh;  // partial s: base + s * hs
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Launched as a programmatic dependent (the host's pdl option), this block may run before the
  // split kernel finishes: wait for it and its memory. Otherwise this returns at once.
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  if (sq.splits <= 1) return;  // whole block
  const float kNegInf = -__int_as_float(0x7f800000);

  float m = kNegInf, sum = 0.0f;
  float acc[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) acc[i] = 0.0f;
  for (int s0 = warp; s0 < sq.splits; s0 += kWarps * kBatch) {
    float ls[kBatch];
    float x[kBatch][kPer];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int s = s0 + u * kWarps;
      ls[u] = kNegInf;
#pragma unroll
      for (int i = 0; i < kPer; ++i) x[u][i] = 0.0f;
      if (s < sq.splits) {
        ls[u] = p.ws_lse[base + s * hs];
        const float* src = p.ws_o + (base + s * hs) * head_dim + lane * kPer;
#pragma unroll
        for (int i = 0; i < kPer; i += 2) {
          const float2 v = *reinterpret_cast<const float2*>(src + i);
          x[u][i] = v.x;
          x[u][i + 1] = v.y;
        }
      }
    }
    fold_partials(ls, x, m, sum, acc);
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) s_acc[warp][lane * kPer + i] = acc[i];
  if (lane == 0) {
    s_max[warp] = m;
    s_sum[warp] = sum;
  }
  __syncthreads();

  float mx = kNegInf;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_max[w]);
  float wt[kWarps];
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    wt[w] = mx == kNegInf ? 0.0f : exp2f(s_max[w] - mx);
    total += wt[w] * s_sum[w];
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  q_dtype* dst = static_cast<q_dtype*>(p.out) + b * p.o_sb + qh * p.o_sh;
  for (int e = int(threadIdx.x); e < head_dim; e += 32 * kWarps) {
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += wt[w] * s_acc[w][e];
    dst[e] = from_float<q_dtype>(v * inv);
  }
  if (threadIdx.x == 0 && p.lse != nullptr) {
    p.lse[b * p.lse_sb + qh * p.lse_sh] = total > 0.0f ? (mx + __log2f(total)) * kLn2 : kNegInf;
  }
}

}  // namespace attention
}  // namespace kjit
