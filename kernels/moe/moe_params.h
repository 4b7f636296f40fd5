// Parameters of the mixture-of-experts kernels (kernels/moe/), shared by NVRTC and the host op
// (src/ops/moe/): one definition, plain C types only. Strides are in elements.
#pragma once

#include "gemm/gemm_params.h"

namespace kjit {
namespace moe {

// Routing (moe_route.cuh): one warp per token.
struct MoeRouteParams {
  const void* logits;   // [tokens, experts] fp32 / bf16 / fp16, row stride logits_stride
  const float* bias;    // [experts] correction bias added for selection only, or null
  int* topk_ids;        // [tokens, top_k] compact
  float* topk_weights;  // [tokens, top_k] compact
  long long tokens, logits_stride;
  int experts, top_k;
  int scoring;              // kMoeScoreSoftmax or kMoeScoreSigmoid
  int n_group, topk_group;  // grouped selection when n_group > 1
  int renormalize;          // weights divided by their sum over the top k
  float routed_scaling_factor;
};

constexpr int kMoeScoreSoftmax = 0;
constexpr int kMoeScoreSigmoid = 1;
constexpr int kMoeMaxExperts = 256;
constexpr int kMoeMaxTopK = 8;
constexpr int kMoeMaxGroups = 32;  // one lane per group
constexpr int kMoeRouteThreads = 128;

// Permutation (moe_permute.cuh): a single-block stable counting sort of the (token, slot) pairs
// by expert, then a grid that copies the rows.
struct MoePermuteParams {
  const int* topk_ids;   // [pairs] = [tokens * top_k] compact
  int* expert_offsets;   // [experts + 1]
  int* permuted_to_src;  // [pairs]: pair index t * top_k + j of each permuted row
  int* src_to_permuted;  // [pairs]: permuted row of each pair; -1 for ids outside [0, experts)
  const void* x;         // [tokens, hidden], row stride x_stride
  void* permuted;        // [pairs, hidden], row stride permuted_stride
  long long pairs, hidden, x_stride, permuted_stride;
  int experts, top_k;
};

constexpr int kMoeSortThreads = 512;
constexpr int kMoeMaxPermuteExperts = 512;  // the sort's buckets: experts + 1 for other ids
constexpr int kMoeCopyThreads = 256;

// Finalize (moe_permute.cuh): out[t] = sum_j w[t, j] * expert_out[src_to_permuted[t, j]] +
// shared_out[t], in fp32.
struct MoeFinalizeParams {
  const void* expert_out;      // [pairs, hidden], row stride expert_stride
  const int* src_to_permuted;  // [tokens, top_k] compact
  const float* topk_weights;   // [tokens, top_k] compact
  const void* shared_out;      // [tokens, hidden] out's dtype, row stride shared_stride, or null
  void* out;                   // [tokens, hidden], row stride out_stride
  long long tokens, hidden, expert_stride, shared_stride, out_stride;
  long long expert_rows;  // rows of expert_out: src_to_permuted outside [0, expert_rows) adds 0
  int top_k;
};

constexpr int kMoeFinalizeThreads = 256;

// Grouped GEMM (moe_gemm_sm90.cuh, moe_gemm_simt.cuh): out rows of expert e =
// a rows of e . b[e]^T. g describes the whole a [rows, k] (g.m = rows), b as [experts * n, k]
// (g.n = n, b_stride = k's row stride) and out [rows, n]; alpha 1, beta 0, no bias.
//   contiguous: expert e's rows are [offsets[e], offsets[e + 1]) (clamped into [0, g.m]).
//   masked (counts != null): rows [e * rows_per_expert, + min(counts[e], rows_per_expert)).
// Each block takes one (row tile, column tile) of a schedule the kernel reads off offsets or
// counts on the device; tiles past the real total exit, so the grid is an upper bound fixed by
// the shapes (graph-safe).
struct MoeGemmParams {
  gemm::GemmParams g;
  const int* offsets;  // [experts + 1], contiguous layout
  const int* counts;   // [experts], masked layout (offsets null)
  long long rows_per_expert;
  int experts;
  int tiles_m;  // the grid's row tiles: an upper bound on the schedule's
  int tiles_n;
};

constexpr int kMoeGemmSchedThreads = 32;  // one warp finds a block's expert

// Row tiles per band of the persistent grouped kernels' item order (gemm::band_tile; the dense
// kernels' kGemmGroupM is 16). Every column tile of a band reads its row tiles of a, and with 16
// rows the 132 blocks in flight read a tile at times far enough apart that the weights streaming
// past evict it in between: DeepSeek-V3's gate_up (256 experts of 128 rows, 4096 x 7168, 15.8 GB
// of operands) moved 20.3 GB from DRAM, _grouped_mm's kernel 15.8. With 4 rows: Qwen3-30B-A3B
// gate_up 387 -> 360 us, Mixtral level (its experts' 8 row tiles now span two bands; H100,
// session 28, docs/performance.md).
constexpr int kMoeGroupM = 4;

// fp8 block-scaled grouped GEMM (moe_gemm_fp8_sm90.cuh): `grouped` over e4m3 a and b (its g's
// m, n, k and row strides in e4m3 elements; tma_a / tma_b over e4m3 pairs, as the fp8 GEMM's),
// and DeepSeek-V3's scales, fp32, compact:
//   scale_a [rows, chunks]: one per 1 x 128 group of a row of a (kjit_quant_fp8's per-group
//     layout; masked: [experts, max_rows, chunks], the same rows);
//   scale_b [experts, n_blocks, chunks]: one per 128 x 128 block of each expert's b,
// with chunks = ceil(k / 128) and n_blocks = ceil(n / 128).
struct MoeGemmFp8Params {
  MoeGemmParams grouped;
  const float* scale_a;
  const float* scale_b;
  long long chunks, n_blocks;
};

// The decode-shape grouped GEMM (moe_gemm_decode_sm90.cuh): clusters of decode blocks
// (gemm_decode_sm90.cuh's geometry) looping over the schedule's (row tile, column tile) items.
// Its blocks per SM at a token tile, e4m3: the dense decode kernel's two (gemm_fp8_params.h)
// below 64 tokens; at 64, the loop's state beside the two accumulator sets spilled under the 96
// registers two blocks leave a thread (ptxas, sm_90a), so one (bf16: two at every tile).
constexpr int moe_fp8_decode_blocks_per_sm(int tokens) {
  return tokens >= 64 ? 1 : 2;
}
constexpr int kMoeDecodeMaxTokens = 64;  // the widest token tile of the decode path

}  // namespace moe
}  // namespace kjit
