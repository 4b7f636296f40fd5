// Activation's descriptor: everything about its ops besides running them. The registry entries
// (OpDef: --set axes, make_spec, catalog, and the realistic definitions `kjit-cli defs export`
// writes to bench/definitions/), the definition of each op at given const axes
// (src/diag/definition.hpp), and the KJIT_TRACE_DUMP hook each op calls after validation
// (src/diag/trace_dump.hpp).
#pragma once

#include <cstdint>

#include "ops/activation/activation.hpp"
#include "diag/definition.hpp"
#include "diag/trace_dump.hpp"
#include "ops/registry.hpp"

namespace kjit::ops {

OpDef act_and_mul_op_def();

Definition act_and_mul_definition(Act act, DType dtype, int64_t d);

namespace trace {
void act_and_mul(Act act, DType dtype, int64_t d, int64_t rows) noexcept;
}  // namespace trace

}  // namespace kjit::ops
