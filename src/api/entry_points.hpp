// The C entry points that take tensors, one row each: the function and its arguments' names and
// kinds in the signature's order. Tensors are "in:", "out:" (written only) or "inout:" (read and
// written in place: logged and dumped before and after); a bare name is a scalar or an enum
// (logged as its int value); "stream" is the stream. The row is the one place besides kjit.h
// that knows a signature:
//  - the definitions in src/api/*_api.cpp log their calls by it (api::entry, below),
//  - `kjit-cli replay` calls an entry point back from a dump by it (tools/kjit-cli/cmd_replay.cpp),
//  - the hostile-input tests call every entry point with every tensor NULL by it.
// "options:" is a versioned options struct (kjit_sampling_options, kjit_gemm_options), logged and
// dumped as the scalars "options.<field>" (api::log_options) from which replay builds the struct
// again. "handle:" is a pointer to a kjit object (not logged). kjit_batch_decode_plan and
// kjit_batch_prefill_plan (host arrays, dtypes, options, an out handle) are logged by hand;
// neither they nor their runs are replayable (no dump holds the plan's host data).
#pragma once

#include "kjit/kjit.h"

// X(function, "arguments")
#define KJIT_TENSOR_ENTRY_POINTS(X)                                                            \
  X(kjit_rmsnorm, "in:input in:weight out:out eps stream")                                     \
  X(kjit_gemma_rmsnorm, "in:input in:weight out:out eps stream")                               \
  X(kjit_fused_add_rmsnorm, "in:weight inout:input inout:residual eps stream")                 \
  X(kjit_gemma_fused_add_rmsnorm, "in:weight inout:input inout:residual eps stream")           \
  X(kjit_layernorm, "in:input in:gamma in:beta out:out eps stream")                            \
  X(kjit_silu_and_mul, "in:input out:out stream")                                              \
  X(kjit_gelu_and_mul, "in:input out:out stream")                                              \
  X(kjit_gelu_tanh_and_mul, "in:input out:out stream")                                         \
  X(kjit_sigmoid_and_mul, "in:input out:out stream")                                           \
  X(kjit_apply_rope_pos_ids,                                                                   \
    "in:q in:k in:pos_ids out:q_out out:k_out rotary_dim layout rope_scale rope_theta stream") \
  X(kjit_apply_llama31_rope_pos_ids,                                                           \
    "in:q in:k in:pos_ids out:q_out out:k_out rotary_dim layout rope_scale rope_theta "        \
    "low_freq_factor high_freq_factor old_context_len stream")                                 \
  X(kjit_apply_rope_with_cos_sin_cache,                                                        \
    "in:positions in:cos_sin_cache inout:q inout:k head_size layout stream")                   \
  X(kjit_append_paged_kv_cache,                                                                \
    "in:append_k in:append_v in:batch_indices in:positions in:kv_indices in:kv_indptr "        \
    "in:kv_last_page_len inout:paged_k_cache inout:paged_v_cache layout stream")               \
  X(kjit_append_paged_kv_cache_fp8,                                                            \
    "in:append_k in:append_v in:batch_indices in:positions in:kv_indices in:kv_indptr "        \
    "in:kv_last_page_len in:k_scale in:v_scale inout:paged_k_cache inout:paged_v_cache "       \
    "layout stream")                                                                           \
  X(kjit_batch_decode_run,                                                                     \
    "handle:plan in:q in:k_cache in:v_cache in:kv_indices in:kv_indptr in:kv_last_page_len "   \
    "out:workspace out:out out:lse k_scale v_scale stream")                                    \
  X(kjit_batch_prefill_run,                                                                    \
    "handle:plan in:q in:k_cache in:v_cache in:qo_indptr in:kv_indices in:kv_indptr "          \
    "in:kv_last_page_len out:workspace out:out out:lse k_scale v_scale stream")                \
  X(kjit_batch_prefill_ragged_run,                                                             \
    "handle:plan in:q in:k in:v in:qo_indptr in:kv_indptr out:workspace out:out out:lse "      \
    "k_scale v_scale stream")                                                                  \
  X(kjit_merge_states, "in:v_a in:s_a in:v_b in:s_b out:v_out out:s_out stream")               \
  X(kjit_merge_states_n, "in:v in:s out:v_out out:s_out stream")                               \
  X(kjit_sampling_from_probs, "in:probs in:seed in:offset out:samples out:valid stream")       \
  X(kjit_top_k_sampling_from_probs,                                                            \
    "in:probs in:top_k_arr in:seed in:offset out:samples out:valid options:options stream")    \
  X(kjit_top_p_sampling_from_probs,                                                            \
    "in:probs in:top_p_arr in:seed in:offset out:samples out:valid options:options stream")    \
  X(kjit_min_p_sampling_from_probs,                                                            \
    "in:probs in:min_p_arr in:seed in:offset out:samples out:valid options:options stream")    \
  X(kjit_top_k_top_p_sampling_from_probs,                                                      \
    "in:probs in:top_k_arr in:top_p_arr in:seed in:offset out:samples out:valid "              \
    "options:options stream")                                                                  \
  X(kjit_top_k_top_p_sampling_from_logits,                                                     \
    "in:logits in:top_k_arr in:top_p_arr in:temperature_arr in:seed in:offset out:samples "    \
    "out:valid options:options stream")                                                        \
  X(kjit_top_k_renorm_probs, "in:probs in:top_k_arr out:out options:options stream")           \
  X(kjit_top_p_renorm_probs, "in:probs in:top_p_arr out:out options:options stream")           \
  X(kjit_top_k_mask_logits, "in:logits in:top_k_arr out:out options:options stream")           \
  X(kjit_softmax, "in:logits in:temperature_arr out:out options:options stream")               \
  X(kjit_argmax, "in:input out:out stream")                                                    \
  X(kjit_chain_speculative_sampling,                                                           \
    "in:draft_probs in:draft_token_ids in:target_probs in:seed in:offset "                     \
    "out:output_token_ids out:accepted out:emitted stream")                                    \
  X(kjit_gemm, "in:a in:b in:bias inout:out options:options stream")                           \
  X(kjit_gemm_fp8, "in:a in:b in:scale_a in:scale_b inout:out options:options stream")         \
  X(kjit_quant_fp8, "in:input out:out out:scale scaling stream")                               \
  X(kjit_embedding, "in:table in:ids out:out stream")                                          \
  X(kjit_rmsnorm_quant_fp8, "in:input in:weight out:out out:scale eps stream")                 \
  X(kjit_fused_add_rmsnorm_quant_fp8,                                                          \
    "in:input in:weight inout:residual out:out out:scale eps stream")                          \
  X(kjit_silu_and_mul_quant_fp8, "in:input out:out out:scale stream")                          \
  X(kjit_moe_route, "in:logits in:bias out:topk_ids out:topk_weights options:options stream")  \
  X(kjit_moe_permute,                                                                          \
    "in:x in:topk_ids out:permuted out:expert_offsets out:permuted_to_src "                    \
    "out:src_to_permuted stream")                                                              \
  X(kjit_moe_finalize,                                                                         \
    "in:expert_out in:src_to_permuted in:topk_weights in:shared_out out:out stream")           \
  X(kjit_moe_grouped_gemm, "in:a in:b in:expert_offsets out:out stream")                       \
  X(kjit_moe_grouped_gemm_masked, "in:a in:b in:counts out:out stream")                        \
  X(kjit_moe_forward,                                                                          \
    "in:x in:router_logits in:bias in:w13 in:w2 in:shared_out out:workspace out:out top_k "    \
    "options:options stream")                                                                  \
  X(kjit_rope_append_paged_kv_cache,                                                           \
    "in:q in:k in:v in:pos_ids in:batch_indices in:positions in:kv_indices in:kv_indptr "      \
    "in:kv_last_page_len in:k_scale in:v_scale out:q_out inout:paged_k_cache "                 \
    "inout:paged_v_cache rotary_dim rope_layout rope_scale rope_theta kv_layout stream")       \
  X(kjit_llama31_rope_append_paged_kv_cache,                                                   \
    "in:q in:k in:v in:pos_ids in:batch_indices in:positions in:kv_indices in:kv_indptr "      \
    "in:kv_last_page_len in:k_scale in:v_scale out:q_out inout:paged_k_cache "                 \
    "inout:paged_v_cache rotary_dim rope_layout rope_scale rope_theta low_freq_factor "        \
    "high_freq_factor old_context_len kv_layout stream")                                       \
  X(kjit_qk_rmsnorm_rope,                                                                      \
    "in:q_weight in:k_weight in:pos_ids inout:q inout:k eps rotary_dim layout rope_scale "     \
    "rope_theta stream")                                                                       \
  X(kjit_moe_grouped_gemm_fp8,                                                                 \
    "in:a in:b in:scale_a in:scale_b in:expert_offsets "                                       \
    "out:out stream")                                                                          \
  X(kjit_moe_grouped_gemm_fp8_masked,                                                          \
    "in:a in:b in:scale_a in:scale_b in:counts "                                               \
    "out:out stream")                                                                          \
  X(kjit_moe_forward_fp8,                                                                      \
    "in:x in:router_logits in:bias in:w13 in:w13_scale in:w2 in:w2_scale in:shared_out "       \
    "out:workspace out:out top_k options:options stream")                                      \
  X(kjit_apply_rope,                                                                           \
    "in:q in:k in:indptr in:offsets out:q_out out:k_out rotary_dim layout rope_scale "         \
    "rope_theta stream")                                                                       \
  X(kjit_apply_llama31_rope,                                                                   \
    "in:q in:k in:indptr in:offsets out:q_out out:k_out rotary_dim layout rope_scale "         \
    "rope_theta low_freq_factor high_freq_factor old_context_len stream")                      \
  X(kjit_top_k, "in:input out:values out:indices k stream")                                    \
  X(kjit_all_reduce, "handle:comm in:in out:out stream")                                       \
  X(kjit_all_reduce_add_rmsnorm, "handle:comm in:in in:weight inout:residual out:out eps stream")

namespace kjit::api {

// The row of one entry point, found at compile time from its address.
template <auto Fn>
struct EntryPoint;
#define KJIT_DECLARE_ENTRY_POINT(fn, args)         \
  template <>                                      \
  struct EntryPoint<&fn> {                         \
    static constexpr const char* name = #fn;       \
    static constexpr const char* arguments = args; \
  };
KJIT_TENSOR_ENTRY_POINTS(KJIT_DECLARE_ENTRY_POINT)
#undef KJIT_DECLARE_ENTRY_POINT

// The number of space-separated words of an argument list.
constexpr int count_words(const char* s) {
  int n = 0;
  bool in_word = false;
  for (; *s != '\0'; ++s) {
    if (*s != ' ' && !in_word) ++n;
    in_word = *s != ' ';
  }
  return n;
}

}  // namespace kjit::api
