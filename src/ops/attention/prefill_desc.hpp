// Prefill attention's descriptor: its registry entry (OpDef: --set axes, make_spec, catalog, the
// realistic definitions `kjit-cli defs export` writes), the definition at given const axes and
// the KJIT_TRACE_DUMP hook the runs call after validation.
#pragma once

#include <cstdint>

#include "diag/definition.hpp"
#include "ops/dtype.hpp"
#include "ops/registry.hpp"

namespace kjit::ops {

OpDef prefill_attention_op_def();

// Batch prefill over a paged KV (kjit_batch_prefill_run) or, page_size 0, a ragged one
// (kjit_batch_prefill_ragged_run).
struct PrefillDefAxes {
  DType dtype = DType::kBF16;  // q, k, v and out
  int64_t qo_heads = 0, kv_heads = 0, head_dim = 0, page_size = 0;
  bool nhd = true;
  bool causal = true;
};
Definition batch_prefill_definition(const PrefillDefAxes& a);

namespace trace {
// total_q: q's rows; num_kv_indices / num_pages: the page table's entries and the caches' pages
// (ragged: 0 and k's rows); kv_len: the requests' mean planned length, the one `bench
// batch_prefill` gives every request.
void batch_prefill(const PrefillDefAxes& axes, int64_t batch, int64_t total_q,
                   int64_t num_kv_indices, int64_t num_pages, int64_t kv_len) noexcept;
}  // namespace trace

}  // namespace kjit::ops
