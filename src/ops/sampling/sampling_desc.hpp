// Sampling's descriptor: everything about its ops besides running them. The registry entries
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

OpDef sampling_filter_op_def();
OpDef softmax_op_def();
OpDef argmax_op_def();
OpDef chain_speculative_op_def();

// The sampling family's C entry points, one definition each.
enum class SamplingKind {
  kFromProbs,           // kjit_sampling_from_probs
  kTopKFromProbs,       // kjit_top_k_sampling_from_probs
  kTopPFromProbs,       // kjit_top_p_sampling_from_probs
  kMinPFromProbs,       // kjit_min_p_sampling_from_probs
  kTopKTopPFromProbs,   // kjit_top_k_top_p_sampling_from_probs
  kTopKTopPFromLogits,  // kjit_top_k_top_p_sampling_from_logits
  kTopKRenormProbs,     // kjit_top_k_renorm_probs
  kTopPRenormProbs,     // kjit_top_p_renorm_probs
  kTopKMaskLogits,      // kjit_top_k_mask_logits
  kSoftmax,             // kjit_softmax
  kArgmax,              // kjit_argmax
};
// Whether the kind reads logits (of any float dtype, named as a suffix unless bf16); the others
// read fp32 probabilities and ignore `dtype`.
bool sampling_reads_logits(SamplingKind kind);
// The sampler a kjit::ops::sample call is: logits input, or probs with the filter bits
// (kFilterTopK | kFilterTopP | kFilterMinP, as sampling.hpp) it applies.
SamplingKind sample_kind(bool logits, int filters);
Definition sampling_definition(SamplingKind kind, DType dtype, int64_t vocab);
// kjit_chain_speculative_sampling with num_draft draft tokens per request.
Definition chain_speculative_definition(int64_t vocab, int64_t num_draft);

namespace trace {
void sampling(SamplingKind kind, DType dtype, int64_t vocab, int64_t batch) noexcept;
void chain_speculative(int64_t vocab, int64_t num_draft, int64_t batch) noexcept;
}  // namespace trace

// kjit_top_k: values and indices of the k largest elements per row.
OpDef top_k_op_def();
Definition top_k_definition(DType dtype, int64_t vocab, int64_t k);
namespace trace {
void top_k(DType dtype, int64_t vocab, int64_t k, int64_t batch) noexcept;
}  // namespace trace

}  // namespace kjit::ops
