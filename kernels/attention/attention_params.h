// Parameters of the attention kernels (kernels/attention/*.cuh), each passed by value as the
// kernel's one __grid_constant__ argument. The host ops (src/ops/attention/) fill these same
// structs: this header is the one definition both NVRTC and the host compiler include, so it holds
// plain C types only (pointers, long long, int, float, TMA descriptors' bytes) and includes
// nothing else. Strides are in elements of their tensor. The names and namespace are part of the
// kernels' mangled names (and so of the cached cubins' entry points): keep them.
#pragma once

#include "common/tma_desc.h"

namespace kjit {
namespace attention {

// decode_kernel and decode_merge_kernel (kernels/attention/decode.cuh).
struct DecodeParams {
  const void* q;        // [batch, qo_heads, head_dim]
  const void* k_cache;  // pages, strides below
  const void* v_cache;
  const int* kv_indices;        // [nnz_pages]
  const int* kv_indptr;         // [batch + 1]
  const int* kv_last_page_len;  // [batch]
  void* out;                    // [batch, qo_heads, head_dim], q's dtype
  float* lse;                   // [batch, qo_heads] natural log, or null
  float* ws_o;                  // [batch, max_splits, qo_heads, head_dim] split partials
  float* ws_lse;                // [batch, max_splits, qo_heads] their lse, log2
  // [batch * kv_heads / heads_per_cta] finished splits (fused merge), or null: merge kernel.
  int* counters;
  long long q_sb, q_sh;
  long long o_sb, o_sh;
  long long lse_sb, lse_sh;
  long long k_sp, k_ss, k_sh;  // k cache page, slot, head strides
  long long v_sp, v_ss, v_sh;
  long long num_pages;
  int batch;
  int num_qo_heads;
  int num_kv_heads;
  int group;  // qo heads per kv head, <= 8 * n_tiles
  int page_size;
  int nnz_pages;
  int chunk;       // tokens per split (the last split of a request takes the rest)
  int max_splits;  // CTAs per (request, kv head); 1: no split, no workspace
  int window_left;
  float score_scale;  // sm_scale * k_scale, then / cap (soft cap) or * log2e (none)
  float cap_out;      // cap * log2e, 0 without a soft cap
  float v_scale;
};

// prefill_kernel (kernels/attention/prefill.cuh): ragged queries over a paged or a ragged KV.
struct PrefillParams {
  const void* q;  // [total_q, qo_heads, head_dim]
  const void* k;  // paged: pages, strides below; ragged: [total_kv, kv_heads, head_dim]
  const void* v;
  const int* qo_indptr;         // [batch + 1], rows of q
  const int* kv_indptr;         // [batch + 1]: pages (paged) or rows of k / v (ragged)
  const int* kv_indices;        // [nnz_pages]; null: ragged KV
  const int* kv_last_page_len;  // [batch]; null: ragged KV
  void* out;                    // [total_q, qo_heads, head_dim], q's dtype
  float* lse;                   // [total_q, qo_heads] natural log, or null
  long long q_sn, q_sh;         // token and head strides
  long long o_sn, o_sh;
  long long lse_sn, lse_sh;
  long long k_sp, k_ss, k_sh;  // page, slot, head strides (ragged: k_sp unused, k_ss per token)
  long long v_sp, v_ss, v_sh;
  long long num_pages;  // paged: pages in the caches; ragged: rows of k and v
  int batch;
  int total_q;     // rows of q and out: a request's rows are clamped to [0, total_q)
  int group;       // qo heads per kv head: a CTA's rows are (token, group member) pairs
  int kv_heads;    // the grid is tiles x kv_heads CTAs (prefill_cta)
  int tiles;       // CTA tiles per kv head (the plan's; a persistent grid walks them all)
  int head_inner;  // 1: the kv head is the CTA index's inner digit, 0: its outer one
  int page_size;
  int nnz_pages;
  int causal;         // query i of q_len over kv_len keys sees keys j <= kv_len - q_len + i
  int window_left;    // -1: off; else also j >= kv_len - q_len + i - window_left
  float score_scale;  // sm_scale * k_scale, then / cap (soft cap) or * log2e (none)
  float cap_out;      // cap * log2e, 0 without a soft cap
  float v_scale;
};

// Most splits a cluster merge combines (the largest, non-portable, cluster on sm_90).
constexpr int kDecodeClusterMax = 16;

// merge_states2_kernel and merge_states_n_kernel (kernels/attention/merge_states.cuh). Rows are
// (seq, head) pairs, r = seq * heads + head.
struct MergeStatesParams {
  const void* v_a;   // [seqs, heads, dim]
  const float* s_a;  // [seqs, heads]
  const void* v_b;
  const float* s_b;
  void* v_out;
  float* s_out;            // may be null
  long long va_ss, va_sh;  // v_a seq, head strides (v_n: also the state stride below)
  long long vb_ss, vb_sh;
  long long vo_ss, vo_sh;
  long long sa_ss, sa_sh;
  long long sb_ss, sb_sh;
  long long so_ss, so_sh;
  long long v_sn, s_sn;  // merge_n: stride of the state index in v (= v_a) and s (= s_a)
  long long rows;
  int heads;
  int dim;
  int n;  // merge_n: number of states
};

// prefill_sm90_kernel (kernels/attention/prefill_sm90.cuh): the query rows a CTA owns (two
// consumer warpgroups of 64) and its threads (a producer warpgroup besides).
constexpr int kPrefillSm90Rows = 128;
constexpr int kPrefillSm90Threads = 384;

// prefill_sm90_kernel's argument: PrefillParams, and K and V as TMA tensors where the host could
// describe them (kv_tma). The maps are 4-D, innermost first: (head_dim, x1, x2, page) with
// (x1, x2) = (kv head, slot) for NHD pages and for ragged keys (one "page" holding every row) and
// (slot, kv head) for HND pages (slot_major), so each dimension's stride grows; a box is 64
// elements x box_rows keys of one kv head. Pages are box_rows-aligned: a power of two >= 8.
struct PrefillSm90Params {
  TmaDescriptor k_map;
  TmaDescriptor v_map;
  PrefillParams p;
  int kv_tma;      // 1: the key tiles below kv_len load by TMA boxes; 0: cp.async everywhere
  int box_rows;    // keys per box: min(page_size, kv_tile); ragged: kv_tile
  int slot_major;  // 1: HND coordinates (slot in x1, kv head in x2)
};

}  // namespace attention
}  // namespace kjit
