// C entry points of the fused RoPE ops: RoPE + paged KV append, per-head QK RMSNorm + RoPE.
#include "api/entry.hpp"
#include "ops/rope/qk_norm_rope.hpp"
#include "ops/rope/rope_append.hpp"
#include "util/error.hpp"

namespace {

// The fused RoPE + append entries' shared body: k_scale and v_scale paired, then the op.
void rope_append(const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* pos_ids,
                 const DLTensor* batch_indices, const DLTensor* positions,
                 const DLTensor* kv_indices, const DLTensor* kv_indptr,
                 const DLTensor* kv_last_page_len, const DLTensor* k_scale, const DLTensor* v_scale,
                 DLTensor* q_out, DLTensor* paged_k_cache, DLTensor* paged_v_cache,
                 const kjit::ops::RopeAppendRope& rope, kjit_kv_layout kv_layout, void* stream) {
  if ((k_scale == nullptr) != (v_scale == nullptr)) {
    kjit::fail(
        KJIT_ERROR_INVALID_ARGUMENT, "{} is NULL but {} is not: both (e4m3 caches) or neither",
        k_scale == nullptr ? "k_scale" : "v_scale", k_scale == nullptr ? "v_scale" : "k_scale");
  }
  kjit::ops::rope_append_paged_kv_cache(q, k, v, pos_ids, batch_indices, positions, kv_indices,
                                        kv_indptr, kv_last_page_len, {k_scale, v_scale}, q_out,
                                        paged_k_cache, paged_v_cache, rope, kv_layout, stream);
}

kjit::ops::RopeAppendRope rope_of(int rotary_dim, kjit_rope_layout rope_layout, float rope_scale,
                                  float rope_theta) {
  kjit::ops::RopeAppendRope rope;
  rope.rotary_dim = rotary_dim;
  rope.interleave = rope_layout;
  rope.rope_scale = rope_scale;
  rope.rope_theta = rope_theta;
  return rope;
}

}  // namespace

extern "C" {

KJIT_API kjit_status kjit_rope_append_paged_kv_cache(
    const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* pos_ids,
    const DLTensor* batch_indices, const DLTensor* positions, const DLTensor* kv_indices,
    const DLTensor* kv_indptr, const DLTensor* kv_last_page_len, const DLTensor* k_scale,
    const DLTensor* v_scale, DLTensor* q_out, DLTensor* paged_k_cache, DLTensor* paged_v_cache,
    int rotary_dim, kjit_rope_layout rope_layout, float rope_scale, float rope_theta,
    kjit_kv_layout kv_layout, void* stream) {
  return kjit::api::entry<&kjit_rope_append_paged_kv_cache>(
      [&] {
        rope_append(q, k, v, pos_ids, batch_indices, positions, kv_indices, kv_indptr,
                    kv_last_page_len, k_scale, v_scale, q_out, paged_k_cache, paged_v_cache,
                    rope_of(rotary_dim, rope_layout, rope_scale, rope_theta), kv_layout, stream);
      },
      q, k, v, pos_ids, batch_indices, positions, kv_indices, kv_indptr, kv_last_page_len, k_scale,
      v_scale, q_out, paged_k_cache, paged_v_cache, rotary_dim, rope_layout, rope_scale, rope_theta,
      kv_layout, stream);
}

KJIT_API kjit_status kjit_llama31_rope_append_paged_kv_cache(
    const DLTensor* q, const DLTensor* k, const DLTensor* v, const DLTensor* pos_ids,
    const DLTensor* batch_indices, const DLTensor* positions, const DLTensor* kv_indices,
    const DLTensor* kv_indptr, const DLTensor* kv_last_page_len, const DLTensor* k_scale,
    const DLTensor* v_scale, DLTensor* q_out, DLTensor* paged_k_cache, DLTensor* paged_v_cache,
    int rotary_dim, kjit_rope_layout rope_layout, float rope_scale, float rope_theta,
    float low_freq_factor, float high_freq_factor, float old_context_len, kjit_kv_layout kv_layout,
    void* stream) {
  return kjit::api::entry<&kjit_llama31_rope_append_paged_kv_cache>(
      [&] {
        kjit::ops::RopeAppendRope rope = rope_of(rotary_dim, rope_layout, rope_scale, rope_theta);
        rope.llama31 = true;
        rope.low_freq_factor = low_freq_factor;
        rope.high_freq_factor = high_freq_factor;
        rope.old_context_len = old_context_len;
        rope_append(q, k, v, pos_ids, batch_indices, positions, kv_indices, kv_indptr,
                    kv_last_page_len, k_scale, v_scale, q_out, paged_k_cache, paged_v_cache, rope,
                    kv_layout, stream);
      },
      q, k, v, pos_ids, batch_indices, positions, kv_indices, kv_indptr, kv_last_page_len, k_scale,
      v_scale, q_out, paged_k_cache, paged_v_cache, rotary_dim, rope_layout, rope_scale, rope_theta,
      low_freq_factor, high_freq_factor, old_context_len, kv_layout, stream);
}

KJIT_API kjit_status kjit_qk_rmsnorm_rope(const DLTensor* q_weight, const DLTensor* k_weight,
                                          const DLTensor* pos_ids, DLTensor* q, DLTensor* k,
                                          float eps, int rotary_dim, kjit_rope_layout layout,
                                          float rope_scale, float rope_theta, void* stream) {
  return kjit::api::entry<&kjit_qk_rmsnorm_rope>(
      [&] {
        kjit::ops::qk_rmsnorm_rope(q_weight, k_weight, pos_ids, q, k, eps, rotary_dim, layout,
                                   rope_scale, rope_theta, stream);
      },
      q_weight, k_weight, pos_ids, q, k, eps, rotary_dim, layout, rope_scale, rope_theta, stream);
}

}  // extern "C"
