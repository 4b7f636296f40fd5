// Attention's descriptor: everything about its ops besides running them. The registry entries
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

OpDef decode_attention_op_def();
OpDef merge_states_op_def();

// Paged batch decode attention (kjit_batch_decode_plan / _run). kv_fp8: an fp8 e4m3 cache
// (otherwise the cache has q's dtype).
struct DecodeDefAxes {
  DType dtype = DType::kBF16;  // q and out
  bool kv_fp8 = false;
  int64_t qo_heads = 0, kv_heads = 0, head_dim = 0, page_size = 0;
  bool nhd = true;
};
Definition batch_decode_definition(const DecodeDefAxes& a);

// kjit_merge_states (two states) or, n_way, kjit_merge_states_n (a var number of them).
Definition merge_states_definition(DType dtype, int64_t heads, int64_t head_dim, bool n_way);

namespace trace {
// kv_len: the requests' mean planned length (pages from kjit_batch_decode_plan's kv_indptr_host
// times page_size, over batch), the one `bench decode_attention` gives every request.
void batch_decode(const DecodeDefAxes& axes, int64_t batch, int64_t num_kv_indices,
                  int64_t num_pages, int64_t kv_len) noexcept;
void merge_states(DType dtype, int64_t heads, int64_t head_dim, int64_t seqs) noexcept;
void merge_states_n(DType dtype, int64_t heads, int64_t head_dim, int64_t seqs,
                    int64_t num_states) noexcept;
}  // namespace trace

}  // namespace kjit::ops
