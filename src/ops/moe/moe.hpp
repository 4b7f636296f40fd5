// Mixture of experts: routing, token permutation and its inverse (finalize), grouped GEMM.
// Validation, specialization and launch (device code: kernels/moe/); the registry entries are
// in moe_desc.cpp.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

#include "jit/spec.hpp"
#include "kjit/kjit.h"
#include "ops/dtype.hpp"
#include "ops/gemm/gemm.hpp"

namespace kjit::ops {

// ---- routing
struct MoeRouteConfig {
  DType dtype = DType::kF32;  // logits
};

// Throws KJIT_ERROR_UNSUPPORTED for logits other than fp32 / bf16 / fp16, more than
// kMoeMaxExperts experts or top_k above kMoeMaxTopK.
MoeRouteConfig select_moe_route(DType dtype, int64_t experts, int64_t top_k);
jit::Spec moe_route_spec(const MoeRouteConfig& cfg);

// Throws KJIT_ERROR_INVALID_ARGUMENT naming the field when the routing options (or top_k) do
// not fit `experts` experts (kjit.h's rules for kjit_moe_route).
void check_moe_route_options(const kjit_moe_route_options& o, int64_t experts, int64_t top_k);

// kjit_moe_route (kjit.h), the options already read. Throws kjit::Error.
void moe_route(const DLTensor* logits, const DLTensor* bias, DLTensor* topk_ids,
               DLTensor* topk_weights, const kjit_moe_route_options& options, void* stream);

// ---- permutation and finalize
// vec: elements per access of the row copies (1 where rows are not 16-byte aligned); buckets: the
// sort's table width, a power of two >= experts + 1.
struct MoePermuteConfig {
  DType dtype = DType::kBF16;
  int vec = 1;
  int buckets = 32;
};

MoePermuteConfig select_moe_permute(DType dtype, int64_t experts, int alignment, int64_t hidden);
jit::Spec moe_permute_spec(const MoePermuteConfig& cfg);

void moe_permute(const DLTensor* x, const DLTensor* topk_ids, DLTensor* permuted,
                 DLTensor* expert_offsets, DLTensor* permuted_to_src, DLTensor* src_to_permuted,
                 void* stream);

struct MoeFinalizeConfig {
  DType dtype = DType::kBF16;  // expert_out, shared_out and out
  int vec = 1;
};

MoeFinalizeConfig select_moe_finalize(DType dtype, int alignment, int64_t hidden);
jit::Spec moe_finalize_spec(const MoeFinalizeConfig& cfg);

void moe_finalize(const DLTensor* expert_out, const DLTensor* src_to_permuted,
                  const DLTensor* topk_weights, const DLTensor* shared_out, DLTensor* out,
                  void* stream);

// ---- grouped GEMM
// path kSm90 (moe_gemm_sm90.cuh, bn and stages as the GEMM's), kSm90Decode (the decode-shape
// kernel, moe_gemm_decode_sm90.cuh: tokens and stages as the dense decode kernel's) or kSimt
// (moe_gemm_simt.cuh).
struct MoeGemmConfig {
  GemmPath path = GemmPath::kSimt;
  DType dtype = DType::kBF16;
  DType out_dtype = DType::kBF16;
  int bn = 0;
  int stages = 0;
  // kSm90 and kSm90Decode, 0 or 1: silu(gate) * up in the epilogue (moe_grouped_gemm_swiglu). An
  // int: the config's bytes are its cache key, so it has no padding.
  int swiglu = 0;
  int tokens = 0;  // kSm90Decode: the token tile (16, 32 or 64)
  // kSm90 only: 1 = moe_gemm_sm90_persistent_kernel (moe_gemm_persistent_sm90.cuh), a grid of
  // min(items, SMs) blocks looping over the schedule's items (moe_gemm_persistent); 2 = its pairs
  // (clusters of two blocks on adjacent column tiles sharing a's rows; MoeGemmTuning::pair).
  int persistent = 0;
  // kSm90 only, 0 or 1: the TMA-store epilogue on the tiles whose rows are all their expert's
  // (moe_tma_out: a 16-bit, TMA-ready out).
  int tma_out = 0;
};

// Whether a grouped call's sm90 tile kernel bn wide with `stages` stages takes the TMA-store
// epilogue: out (its whole [rows, n] or [rows, n / 2]) 16-bit and TMA-ready, and the 32 KB of
// staging fit beside the ring on `target`.
bool moe_tma_out(const RowMatrix& out, const GemmTarget& target, int bn, int stages);

// The decode path's bound on one row tile's rows (the token tile holds them), from what the host
// knows, or 0 where that path is not the choice: masked, max_rows (rows_per_expert) up to 64;
// contiguous, all the rows up to 64 (no expert can have more), else, up to 512 rows (64 tokens of
// top 8), 4 x the even share rows / experts where that is at most 64 (an expert with more rows
// than the tile takes a second tile: correct, its weight streamed twice).
int64_t moe_decode_rows(bool masked, int64_t rows, int64_t rows_per_expert, int64_t experts);

// A grouped GEMM kernel the bench and the tests force: kDecode, the decode kernel (its token
// tile from the host's bound on an expert's rows, capped at 64); kTiles, the 128-row tile wgmma
// kernel.
enum class MoeGemmForce { kNone = 0, kDecode = 1, kTiles = 2 };

// Choices the bench and the tests override; the defaults are the C entry points'.
struct MoeGemmTuning {
  // A forced kernel that cannot serve the call is KJIT_ERROR_INVALID_ARGUMENT.
  MoeGemmForce force = MoeGemmForce::kNone;
  // The decode kernel's split of K over a cluster (1 .. kGemmDecodeMaxSplit); 0: chosen from
  // the device's residency and the active items expected. Unused by the other kernels.
  int split = 0;
  // The persistent form of the 128-row tile kernel (bf16 / fp16 and fp8): implies kTiles, so a
  // call the tile kernel cannot serve is KJIT_ERROR_INVALID_ARGUMENT as that force's. The tile
  // path runs it anyway (moe_gemm_persistent); force kTiles alone for its one-block-per-item
  // form.
  bool persistent = false;
  // The persistent tile kernel in pairs (bf16 / fp16 and fp8; implies persistent): clusters of two
  // blocks on column tiles 2j and 2j + 1 of one row tile, rank 0 loading a's rows into both (TMA
  // multicast).
  bool pair = false;
  // The tile kernel's width: 0 = the selection's, or 128 / 256 (fp8: gemm_fp8_sm90.cuh's 256-wide
  // tile, two 128-column halves promoted in turn, with SwiGLU I a multiple of 128), on the tile
  // path only (force kTiles at decode sizes).
  int bn = 0;
};

// Whether the persistent tile kernel's pairs are the default for a call: each expert's rows fit
// one 128-row tile on average (avg_rows <= 128, so every column tile of an expert re-reads the
// same rows of a, which a pair loads once for two), K is a weight stream's (k >= 4096), and there
// are two column tiles bn wide (n: b's rows an expert) to pair.
bool moe_pairs_pay(int64_t avg_rows, int64_t n, int64_t k, int bn);

// MoeGemmConfig::persistent (MoeGemmFp8Config's too) of a call: 2 when the tuning asks for pairs,
// 1 when it asks for the persistent form, or on the tile path (tiles), SwiGLU or not, unless the
// tuning forces kTiles: 2 there where pairs pay (moe_pairs_pay), else 1.
int moe_gemm_persistent(const MoeGemmTuning& t, bool tiles, bool pairs_pay = false);

// decode_rows of a call under a tuning: moe_decode_rows, or what the tuning forces (the host's
// bound on an expert's rows, capped at the widest tile, for the decode kernel; 0 for the tile
// kernel, persistent or not). rows: a's rows (masked: experts x rows_per_expert).
int64_t moe_tuned_decode_rows(const MoeGemmTuning& t, bool masked, int64_t rows,
                              int64_t rows_per_expert, int64_t experts);
// Throws KJIT_ERROR_INVALID_ARGUMENT when the tuning forces a kernel the call did not get (decode:
// whether it got the decode kernel; tiles: the 128-row tile kernel, which the persistent form is).
void check_moe_forced(const char* op, const MoeGemmTuning& t, bool decode, bool tiles);

// The decode path where decode_rows (moe_decode_rows) is 1 .. 64 and gemm_decode_tile serves it
// on `target` (sm_90a, TMA-ready a and b); else the wgmma path on a compute capability 9.0 device
// where TMA can describe a and b (k > 0); the fallback otherwise. rows: a's rows (sum of M, or
// experts x max rows); avg_rows: rows per expert in an even routing, which picks the tile width.
MoeGemmConfig select_moe_gemm(DType dtype, DType out_dtype, int64_t rows, int64_t avg_rows,
                              int64_t n, int64_t k, int64_t experts, const GemmTarget& target,
                              int64_t decode_rows = 0);
jit::Spec moe_gemm_spec(const MoeGemmConfig& cfg);
// Whether the bf16 / fp16 128-row tile kernel takes 256-wide tiles (4 stages) instead of 128-wide
// ones at avg_rows rows an expert: from 128. 256-wide tiles load 25% fewer bytes a FLOP, and with
// one row tile an expert they read its rows half as often. On an H100 (cupti read, checked)
// they ran Qwen3-30B-A3B's gate_up at 4096 tokens (256 rows an expert) in 441.0-448.7 us against
// 462.2-463.4 (SwiGLU 384.0-389.1 against 414.6-423.5, down 274.3-278.2 against 282.5-284.1;
// session 22), at 2048 tokens (128 rows) in 359.9-361.4 against 378.2-379.0, DeepSeek-V3's (E 256,
// N 4096, K 7168) at 4096 tokens (128 rows) in 6980 against 8131-8259 (session 23), and Mixtral's
// (1024) in 2967-3038 against 3889-3923. Fewer rows an expert are unmeasured.
inline bool moe_wide_tile(int64_t avg_rows) {
  return avg_rows >= 128;
}
// The fp8 grouped kernel's rule: from 256 rows an expert. At 128 (Qwen3-30B-A3B at 2048 tokens,
// H100, session 23) the 256-wide tile ran 204.5-205.0 us against 202.1-203.2: level or behind.
inline bool moe_fp8_wide_tile(int64_t avg_rows) {
  return avg_rows >= 256;
}
// Applies MoeGemmTuning::bn to a selected bf16 / fp16 config: 128 with 6 stages or 256 with 4 on
// the tile path. Throws KJIT_ERROR_INVALID_ARGUMENT for another width or on another path.
void moe_gemm_width(MoeGemmConfig& c, const MoeGemmTuning& t);
// A selected config as a call runs it: moe_gemm_width, then the form (moe_gemm_persistent, pairs
// where moe_pairs_pay at avg_rows rows an expert). The entry points and the bench share it.
void moe_gemm_tune(MoeGemmConfig& c, const MoeGemmTuning& t, int64_t avg_rows, int64_t n,
                   int64_t k);

// kjit_moe_grouped_gemm: a [rows, k], b [experts, n, k], expert_offsets [experts + 1] int32.
void moe_grouped_gemm(const DLTensor* a, const DLTensor* b, const DLTensor* expert_offsets,
                      DLTensor* out, void* stream, const MoeGemmTuning& tuning = {});
// kjit_moe_grouped_gemm_masked: a [experts, max_rows, k], counts [experts] int32.
void moe_grouped_gemm_masked(const DLTensor* a, const DLTensor* b, const DLTensor* counts,
                             DLTensor* out, void* stream, const MoeGemmTuning& tuning = {});
// The gate / up GEMM of SwiGLU experts with silu_and_mul in its epilogue: w13 [experts, 2 I, k]
// (gate rows 0 .. I - 1, up rows I .. 2I - 1), out [rows, I] (masked: [experts, max_rows, I]) =
// silu(a . gate^T) * (a . up^T), in fp32, rounded once. Only the wgmma path (sm_90a, TMA-ready
// operands) has this epilogue: where it cannot serve the call, returns false after validation
// and launches nothing (the caller runs moe_grouped_gemm and act_and_mul instead).
bool moe_grouped_gemm_swiglu(const DLTensor* a, const DLTensor* w13, const DLTensor* expert_offsets,
                             DLTensor* out, void* stream, const MoeGemmTuning& tuning = {});
bool moe_grouped_gemm_swiglu_masked(const DLTensor* a, const DLTensor* w13, const DLTensor* counts,
                                    DLTensor* out, void* stream, const MoeGemmTuning& tuning = {});

// ---- fp8 block-scaled grouped GEMM (moe_gemm.cpp; device code moe_gemm_fp8_sm90.cuh) ----------
// The sm_90a kernel only (bn 128, the fp8 GEMM's tile). swiglu: an int for the key's bytes.
struct MoeGemmFp8Config {
  DType out_dtype = DType::kBF16;
  int stages = 0;
  int swiglu = 0;
  int tokens = 0;  // 0: the 128-row tile kernel; else the decode kernel's token tile (16 .. 64)
  // The tile kernel only, 0, 1 or 2: moe_gemm_fp8_sm90_persistent_kernel, 2 its pairs (as
  // MoeGemmConfig's).
  int persistent = 0;
  int bn = 128;     // the tile kernel's width: 128, or 256 (moe_wide_tile, or MoeGemmTuning::bn)
  int tma_out = 0;  // the tile kernel only: as MoeGemmConfig's
};

// Applies MoeGemmTuning::bn to a selected fp8 config of n columns (b's rows; 2 I with SwiGLU):
// bn 256 with 4 stages on the tile path. Throws KJIT_ERROR_INVALID_ARGUMENT for a width other than
// 128 or 256, on the decode path, or with SwiGLU where I is not a multiple of 128.
void moe_gemm_fp8_width(MoeGemmFp8Config& c, const MoeGemmTuning& t, int64_t n, bool swiglu);
// moe_gemm_tune's fp8 form (moe_gemm_fp8_width, then the form).
void moe_gemm_fp8_tune(MoeGemmFp8Config& c, const MoeGemmTuning& t, int64_t avg_rows, int64_t n,
                       int64_t k, bool swiglu);

// Support and dispatch in one place: the wgmma kernel on a compute capability 9.0 device with
// TMA-ready e4m3 a and b (target.tma_ok: 16-byte aligned bases and row strides, k > 0 a multiple
// of 16), within the grid's and TMA's limits; with swiglu, n = 2 I with I a multiple of 64 (a
// gate / up slice in one 128-row scale block). Throws KJIT_ERROR_UNSUPPORTED otherwise, saying
// why (there is no fallback).
// decode_rows: moe_decode_rows's bound; 1 .. 64 picks the decode kernel where it can run.
MoeGemmFp8Config select_moe_gemm_fp8(DType out_dtype, int64_t rows, int64_t n, int64_t k,
                                     int64_t experts, bool swiglu, const GemmTarget& target,
                                     int64_t decode_rows = 0);
jit::Spec moe_gemm_fp8_spec(const MoeGemmFp8Config& cfg);

// kjit_moe_grouped_gemm_fp8: a [rows, k] e4m3, b [experts, n, k] e4m3, scale_a [rows,
// ceil(k / 128)], scale_b [experts, ceil(n / 128), ceil(k / 128)] fp32, expert_offsets
// [experts + 1] int32.
void moe_grouped_gemm_fp8(const DLTensor* a, const DLTensor* b, const DLTensor* scale_a,
                          const DLTensor* scale_b, const DLTensor* expert_offsets, DLTensor* out,
                          void* stream, const MoeGemmTuning& tuning = {});
// kjit_moe_grouped_gemm_fp8_masked: a [experts, max_rows, k], scale_a [experts, max_rows,
// ceil(k / 128)], counts [experts] int32.
void moe_grouped_gemm_fp8_masked(const DLTensor* a, const DLTensor* b, const DLTensor* scale_a,
                                 const DLTensor* scale_b, const DLTensor* counts, DLTensor* out,
                                 void* stream, const MoeGemmTuning& tuning = {});
// The fp8 gate / up GEMM with silu_and_mul in its epilogue (as moe_grouped_gemm_swiglu; w13_scale
// [experts, ceil(2 I / 128), ceil(k / 128)]). False after validation, launching nothing, when I
// is not a multiple of 64.
bool moe_grouped_gemm_fp8_swiglu(const DLTensor* a, const DLTensor* w13, const DLTensor* scale_a,
                                 const DLTensor* w13_scale, const DLTensor* expert_offsets,
                                 DLTensor* out, void* stream, const MoeGemmTuning& tuning = {});
bool moe_grouped_gemm_fp8_swiglu_masked(const DLTensor* a, const DLTensor* w13,
                                        const DLTensor* scale_a, const DLTensor* w13_scale,
                                        const DLTensor* counts, DLTensor* out, void* stream,
                                        const MoeGemmTuning& tuning = {});

// ---- the whole layer (moe_forward.cpp) ---------------------------------------------------------
// Byte offsets of kjit_moe_forward's workspace regions, each 256-byte aligned, and its size.
// pairs = tokens * top_k rows flow through the experts.
struct MoeForwardLayout {
  size_t topk_ids = 0;         // [tokens, top_k] int32
  size_t topk_weights = 0;     // [tokens, top_k] fp32
  size_t offsets = 0;          // [experts + 1] int32
  size_t permuted_to_src = 0;  // [pairs] int32
  size_t src_to_permuted = 0;  // [tokens, top_k] int32
  size_t rows = 0;     // [pairs, hidden]: the permuted x, then (x no longer read) the experts' out
  size_t gate_up = 0;  // [pairs, 2 intermediate]: the unfused path's gate_up GEMM output
  size_t act = 0;      // [pairs, intermediate]: silu(gate) * up, the down GEMM's a
  // fp8 experts only (0 otherwise): the rows and the activation quantized per 1 x 128 group.
  size_t rows_fp8 = 0;    // [pairs, hidden] e4m3
  size_t rows_scale = 0;  // [pairs, ceil(hidden / 128)] fp32
  size_t act_fp8 = 0;     // [pairs, intermediate] e4m3
  size_t act_scale = 0;   // [pairs, ceil(intermediate / 128)] fp32
  size_t bytes = 0;
};

// dtype: the experts' weights, bf16 / fp16 (x's dtype too) or e4m3 (x bf16 or fp16: the layout
// is the same for both). Throws KJIT_ERROR_INVALID_ARGUMENT for negative sizes, top_k outside
// 1 .. experts or a size that overflows (pairs must stay below 2^31), KJIT_ERROR_UNSUPPORTED for
// another dtype. Pure host arithmetic.
MoeForwardLayout moe_forward_layout(int64_t tokens, int64_t experts, int64_t top_k, int64_t hidden,
                                    int64_t intermediate, DType dtype);

// kjit_moe_forward_fp8 (kjit.h): w13 / w2 e4m3 with their 128 x 128 block scales.
void moe_forward_fp8(const DLTensor* x, const DLTensor* router_logits, const DLTensor* bias,
                     const DLTensor* w13, const DLTensor* w13_scale, const DLTensor* w2,
                     const DLTensor* w2_scale, const DLTensor* shared_out, DLTensor* workspace,
                     DLTensor* out, int top_k, const kjit_moe_route_options& route, void* stream);

// kjit_moe_forward (kjit.h), the routing options already read. Throws kjit::Error.
void moe_forward(const DLTensor* x, const DLTensor* router_logits, const DLTensor* bias,
                 const DLTensor* w13, const DLTensor* w2, const DLTensor* shared_out,
                 DLTensor* workspace, DLTensor* out, int top_k, const kjit_moe_route_options& route,
                 void* stream);

}  // namespace kjit::ops
