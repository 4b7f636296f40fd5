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
// path kSm90 (moe_gemm_sm90.cuh, bn and stages as the GEMM's) or kSimt (moe_gemm_simt.cuh).
struct MoeGemmConfig {
  GemmPath path = GemmPath::kSimt;
  DType dtype = DType::kBF16;
  DType out_dtype = DType::kBF16;
  int bn = 0;
  int stages = 0;
};

// The wgmma path on a compute capability 9.0 device where TMA can describe a and b (k > 0); the
// fallback otherwise. rows: a's rows (sum of M, or experts x max rows); avg_rows: rows per expert
// in an even routing, which picks the tile width.
MoeGemmConfig select_moe_gemm(DType dtype, DType out_dtype, int64_t rows, int64_t avg_rows,
                              int64_t n, int64_t k, int64_t experts, const GemmTarget& target);
jit::Spec moe_gemm_spec(const MoeGemmConfig& cfg);

// kjit_moe_grouped_gemm: a [rows, k], b [experts, n, k], expert_offsets [experts + 1] int32.
void moe_grouped_gemm(const DLTensor* a, const DLTensor* b, const DLTensor* expert_offsets,
                      DLTensor* out, void* stream);
// kjit_moe_grouped_gemm_masked: a [experts, max_rows, k], counts [experts] int32.
void moe_grouped_gemm_masked(const DLTensor* a, const DLTensor* b, const DLTensor* counts,
                             DLTensor* out, void* stream);

}  // namespace kjit::ops
