// The definition of each op at given const axes (definition.hpp), and the set of realistic ones
// each registry op exports (`kjit-cli defs export`, bench/definitions/). Names are op + const
// axes, with the activation dtype as a suffix unless it is bf16 (so the bf16 names match
// flashinfer-bench's: `rmsnorm_h4096`, `rmsnorm_h4096_fp16`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ops/activation/activation.hpp"
#include "diag/definition.hpp"
#include "ops/tensor.hpp"

namespace kjit::ops {

struct OpDef;

Definition rmsnorm_definition(DType dtype, int64_t hidden, bool gemma);
Definition fused_add_rmsnorm_definition(DType dtype, int64_t hidden, bool gemma);
Definition layernorm_definition(DType dtype, DType param_dtype, int64_t hidden);
Definition act_and_mul_definition(Act act, DType dtype, int64_t d);

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

Definition append_paged_kv_definition(DType dtype, int64_t kv_heads, int64_t head_dim,
                                      int64_t page_size, bool nhd);

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

// The definitions registry op `op` exports (empty for an op without any).
std::vector<Definition> op_definitions(std::string_view op);

// Gives every OpDef without a `definitions` hook the one op_definitions() has for it.
std::vector<OpDef> with_definitions(std::vector<OpDef> defs);

// flashinfer-bench's dtype spelling: "bfloat16", "float16", "float32", "int32", "int64".
const char* def_dtype_name(DType t);

}  // namespace kjit::ops
