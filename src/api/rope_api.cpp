// C entry points of the rotary position embedding family.
#include "api/entry.hpp"
#include "ops/rope/rope.hpp"

extern "C" {

KJIT_API kjit_status kjit_apply_rope_pos_ids(const DLTensor* q, const DLTensor* k, DLTensor* q_out,
                                             DLTensor* k_out, const DLTensor* pos_ids,
                                             int rotary_dim, int interleave, float rope_scale,
                                             float rope_theta, void* stream) {
  return kjit::api::entry<&kjit_apply_rope_pos_ids>(
      [&] {
        kjit::ops::apply_rope_pos_ids(q, k, q_out, k_out, pos_ids, rotary_dim, interleave,
                                      rope_scale, rope_theta, stream);
      },
      q, k, q_out, k_out, pos_ids, rotary_dim, interleave, rope_scale, rope_theta, stream);
}

KJIT_API kjit_status kjit_apply_llama31_rope_pos_ids(
    const DLTensor* q, const DLTensor* k, DLTensor* q_out, DLTensor* k_out, const DLTensor* pos_ids,
    int rotary_dim, int interleave, float rope_scale, float rope_theta, float low_freq_factor,
    float high_freq_factor, float old_context_len, void* stream) {
  return kjit::api::entry<&kjit_apply_llama31_rope_pos_ids>(
      [&] {
        kjit::ops::apply_llama31_rope_pos_ids(q, k, q_out, k_out, pos_ids, rotary_dim, interleave,
                                              rope_scale, rope_theta, low_freq_factor,
                                              high_freq_factor, old_context_len, stream);
      },
      q, k, q_out, k_out, pos_ids, rotary_dim, interleave, rope_scale, rope_theta, low_freq_factor,
      high_freq_factor, old_context_len, stream);
}

KJIT_API kjit_status kjit_apply_rope_with_cos_sin_cache(const DLTensor* positions, DLTensor* q,
                                                        DLTensor* k, int head_size,
                                                        const DLTensor* cos_sin_cache, int is_neox,
                                                        void* stream) {
  return kjit::api::entry<&kjit_apply_rope_with_cos_sin_cache>(
      [&] {
        kjit::ops::apply_rope_with_cos_sin_cache(positions, q, k, head_size, cos_sin_cache, is_neox,
                                                 stream);
      },
      positions, q, k, head_size, cos_sin_cache, is_neox, stream);
}

}  // extern "C"
