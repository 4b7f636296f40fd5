// GEMM's descriptor: everything about kjit_gemm besides running it. The registry entry (OpDef:
// --set axes, make_spec, catalog, and the realistic definitions `kjit-cli defs export` writes to
// bench/definitions/), the definition at given const axes (src/diag/definition.hpp), and the
// KJIT_TRACE_DUMP hook the op calls after validation (src/diag/trace_dump.hpp).
#pragma once

#include <cstdint>

#include "diag/definition.hpp"
#include "diag/trace_dump.hpp"
#include "ops/dtype.hpp"
#include "ops/registry.hpp"

namespace kjit::ops {

OpDef gemm_op_def();

// The (n, k) of the definitions both GEMM descriptors export: the weights of Llama 3 70B's MLP
// (28672 x 4096, 4096 x 14336 after the gate), 8B's fused QKV (6144 x 4096) and 70B's attention
// out (8192 x 8192), the shapes bench/suites/gemm.jsonl times.
inline constexpr int64_t kGemmDefinitionShapes[][2] = {
    {28672, 4096}, {4096, 14336}, {6144, 4096}, {8192, 8192}};

// kjit_gemm with a [m, k] (m the var axis), b [n, k], out [m, n] in out_dtype, and a bias [n]
// when `bias`.
Definition gemm_definition(DType dtype, DType out_dtype, int64_t n, int64_t k, bool bias);

// A tile spec's tma_out setting (--set tma_out=1: the TMA-store epilogue) for `op`: false when
// absent or 0; true when the tile kernel it names (a 16-bit out, bn wide, `stages` deep) leaves its
// staging room on an H100 / H200 (gemm_tma_out); otherwise KJIT_ERROR_INVALID_ARGUMENT. The
// caller checks that the spec's path has the epilogue. Shared by the gemm, gemm_fp8 and grouped
// GEMM descriptors.
bool spec_tma_out(const char* op, const SetArgs& args, DType out_dtype, int bn, int stages);

namespace trace {
void gemm(DType dtype, DType out_dtype, int64_t m, int64_t n, int64_t k, bool bias) noexcept;
}  // namespace trace

}  // namespace kjit::ops
