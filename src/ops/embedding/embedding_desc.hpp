// Embedding's descriptor: everything about the gather besides running it. The registry entry
// (OpDef: --set axes, make_spec, catalog, and the realistic definitions `kjit-cli defs export`
// writes to bench/definitions/), the definition at given const axes (src/diag/definition.hpp),
// and the KJIT_TRACE_DUMP hook the op calls after validation (src/diag/trace_dump.hpp).
#pragma once

#include <cstdint>

#include "diag/definition.hpp"
#include "diag/trace_dump.hpp"
#include "ops/embedding/embedding.hpp"
#include "ops/registry.hpp"

namespace kjit::ops {

OpDef embedding_op_def();

Definition embedding_definition(DType dtype, DType index, int64_t vocab, int64_t hidden);

namespace trace {
void embedding(DType dtype, DType index, int64_t vocab, int64_t hidden, int64_t tokens) noexcept;
}  // namespace trace

}  // namespace kjit::ops
