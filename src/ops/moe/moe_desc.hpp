// The MoE family's descriptor: the registry entries (OpDefs) of routing, permutation, finalize
// and the grouped GEMM, their definitions at given const axes, and the KJIT_TRACE_DUMP hooks the
// ops call after validation.
#pragma once

#include <cstdint>

#include "diag/definition.hpp"
#include "diag/trace_dump.hpp"
#include "kjit/kjit.h"
#include "ops/dtype.hpp"
#include "ops/registry.hpp"

namespace kjit::ops {

OpDef moe_route_op_def();
OpDef moe_permute_op_def();
OpDef moe_finalize_op_def();
OpDef moe_grouped_gemm_op_def();
OpDef moe_grouped_gemm_fp8_op_def();

// kjit_moe_route of logits [tokens, experts] (tokens the var axis) with `n_group` groups
// (1: none) and scoring `sigmoid` or softmax.
Definition moe_route_definition(DType dtype, int64_t experts, int64_t top_k, int64_t n_group,
                                bool sigmoid);
// kjit_moe_permute of x [tokens, hidden] and kjit_moe_finalize of its expert outputs.
Definition moe_permute_definition(DType dtype, int64_t hidden, int64_t experts, int64_t top_k);
Definition moe_finalize_definition(DType dtype, int64_t hidden, int64_t top_k, bool shared);
// kjit_moe_grouped_gemm (masked: kjit_moe_grouped_gemm_masked) with b [experts, n, k].
Definition moe_grouped_gemm_definition(bool masked, DType dtype, DType out_dtype, int64_t experts,
                                       int64_t n, int64_t k);
// kjit_moe_grouped_gemm_fp8 (masked: _masked) with b [experts, n, k] e4m3 and block scales.
Definition moe_grouped_gemm_fp8_definition(bool masked, DType out_dtype, int64_t experts, int64_t n,
                                           int64_t k);

namespace trace {
void moe_route(DType dtype, int64_t tokens, int64_t experts, int64_t top_k,
               const kjit_moe_route_options& o) noexcept;
void moe_permute(DType dtype, int64_t tokens, int64_t hidden, int64_t experts,
                 int64_t top_k) noexcept;
void moe_finalize(DType dtype, int64_t tokens, int64_t hidden, int64_t top_k, bool shared) noexcept;
void moe_grouped_gemm(const char* layout, DType dtype, DType out_dtype, int64_t rows, int64_t n,
                      int64_t k, int64_t experts) noexcept;
void moe_grouped_gemm_fp8(bool masked, DType out_dtype, int64_t rows, int64_t n, int64_t k,
                          int64_t experts) noexcept;
}  // namespace trace

}  // namespace kjit::ops
