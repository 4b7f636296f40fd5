// Rope's descriptor: everything about its ops besides running them. The registry entries
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

OpDef rope_op_def();

enum class RopeKind { kPosIds, kLlama31, kCosSinCache };
struct RopeDefAxes {
  RopeKind kind = RopeKind::kPosIds;
  DType dtype = DType::kBF16;
  int64_t qo_heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0;
  bool interleave = false;           // GPT-J pairs (for kCosSinCache: !is_neox)
  DType pos_dtype = DType::kI32;     // pos_ids / positions
  DType cache_dtype = DType::kBF16;  // kCosSinCache: the cos_sin_cache dtype
};
Definition rope_definition(const RopeDefAxes& a);

namespace trace {
// max_position: rows of the cos/sin cache (kCosSinCache only).
void rope(const RopeDefAxes& axes, int64_t tokens, int64_t max_position) noexcept;
}  // namespace trace

}  // namespace kjit::ops
