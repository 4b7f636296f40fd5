// Norm's descriptor: everything about its ops besides running them. The registry entries
// (OpDef: --set axes, make_spec, catalog, and the realistic definitions `kjit-cli defs export`
// writes to bench/definitions/), the definition of each op at given const axes
// (src/diag/definition.hpp), and the KJIT_TRACE_DUMP hook each op calls after validation
// (src/diag/trace_dump.hpp).
#pragma once

#include <cstdint>

#include "ops/dtype.hpp"
#include "diag/definition.hpp"
#include "diag/trace_dump.hpp"
#include "ops/registry.hpp"

namespace kjit::ops {

OpDef rmsnorm_op_def();
OpDef fused_add_rmsnorm_op_def();
OpDef layernorm_op_def();

Definition rmsnorm_definition(DType dtype, int64_t hidden, bool gemma);
Definition fused_add_rmsnorm_definition(DType dtype, int64_t hidden, bool gemma);
Definition layernorm_definition(DType dtype, DType param_dtype, int64_t hidden);

namespace trace {
void rmsnorm(DType dtype, int64_t hidden, int64_t rows, bool gemma) noexcept;
void fused_add_rmsnorm(DType dtype, int64_t hidden, int64_t rows, bool gemma) noexcept;
void layernorm(DType dtype, DType param_dtype, int64_t hidden, int64_t rows) noexcept;
}  // namespace trace

}  // namespace kjit::ops
