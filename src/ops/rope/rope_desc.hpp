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
  DType pos_dtype = DType::kI32;     // pos_ids / positions (indptr: indptr and offsets)
  DType cache_dtype = DType::kBF16;  // kCosSinCache: the cos_sin_cache dtype
  // kPosIds / kLlama31: positions from indptr and offsets (kjit_apply_rope /
  // kjit_apply_llama31_rope) instead of pos_ids.
  bool indptr = false;
};
Definition rope_definition(const RopeDefAxes& a);

namespace trace {
// max_position: rows of the cos/sin cache (kCosSinCache only); batch: requests (indptr only).
void rope(const RopeDefAxes& axes, int64_t tokens, int64_t max_position,
          int64_t batch = 0) noexcept;
}  // namespace trace

// The fused RoPE + paged KV append (kjit_rope_append_paged_kv_cache).
OpDef rope_append_op_def();

struct RopeAppendDefAxes {
  DType dtype = DType::kBF16;
  int64_t qo_heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0;
  bool interleave = false;
  DType pos_dtype = DType::kI32;  // pos_ids
  int64_t page_size = 16;
  bool nhd = true;
  int64_t num_scales = 0;  // e4m3 caches: 1 (per tensor) or kv_heads (per head); 0: 16-bit caches
};
Definition rope_append_definition(const RopeAppendDefAxes& a);

namespace trace {
void rope_append(const RopeAppendDefAxes& axes, int64_t tokens, int64_t batch,
                 int64_t num_kv_indices, int64_t num_pages) noexcept;
}  // namespace trace

// The fused per-head QK RMSNorm + RoPE (kjit_qk_rmsnorm_rope).
OpDef qk_norm_rope_op_def();

struct QkNormRopeDefAxes {
  DType dtype = DType::kBF16;
  int64_t qo_heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0;
  bool interleave = false;
  DType pos_dtype = DType::kI32;
};
Definition qk_norm_rope_definition(const QkNormRopeDefAxes& a);

namespace trace {
void qk_norm_rope(const QkNormRopeDefAxes& axes, int64_t tokens) noexcept;
}  // namespace trace

}  // namespace kjit::ops
