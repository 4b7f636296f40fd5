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

#include "ops/activation.hpp"
#include "ops/definition.hpp"
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

// The definitions registry op `op` exports (empty for an op without any).
std::vector<Definition> op_definitions(std::string_view op);

// Gives every OpDef without a `definitions` hook the one op_definitions() has for it.
std::vector<OpDef> with_definitions(std::vector<OpDef> defs);

// flashinfer-bench's dtype spelling: "bfloat16", "float16", "float32", "int32", "int64".
const char* def_dtype_name(DType t);

}  // namespace kjit::ops
