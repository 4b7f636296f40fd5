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

// kjit_gemm with a [m, k] (m the var axis), b [n, k], out [m, n] in out_dtype, and a bias [n]
// when `bias`.
Definition gemm_definition(DType dtype, DType out_dtype, int64_t n, int64_t k, bool bias);

namespace trace {
void gemm(DType dtype, DType out_dtype, int64_t m, int64_t n, int64_t k, bool bias) noexcept;
}  // namespace trace

}  // namespace kjit::ops
