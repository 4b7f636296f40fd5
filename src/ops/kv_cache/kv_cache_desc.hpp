// The KV cache family's descriptor: everything about its ops besides running them. The registry
// entries (OpDef: --set axes, make_spec, catalog, and the realistic definitions `kjit-cli defs
// export` writes to bench/definitions/), the definition of each op at given const axes
// (src/diag/definition.hpp), and the KJIT_TRACE_DUMP hook each op calls after validation
// (src/diag/trace_dump.hpp).
#pragma once

#include <cstdint>

#include "ops/dtype.hpp"
#include "diag/definition.hpp"
#include "diag/trace_dump.hpp"
#include "ops/registry.hpp"

namespace kjit::ops {

OpDef append_paged_kv_op_def();

// cache_fp8: the caches hold float8 e4m3 (kjit_append_paged_kv_cache_fp8, with scales).
Definition append_paged_kv_definition(DType dtype, int64_t kv_heads, int64_t head_dim,
                                      int64_t page_size, bool nhd, bool cache_fp8 = false);

namespace trace {
// num_scales: the fp8 caches' scale count (0 for 16/32-bit caches).
void append_paged_kv(DType dtype, int64_t num_scales, int64_t kv_heads, int64_t head_dim,
                     int64_t page_size, bool nhd, int64_t tokens, int64_t batch,
                     int64_t num_kv_indices, int64_t num_pages) noexcept;
}  // namespace trace

}  // namespace kjit::ops
