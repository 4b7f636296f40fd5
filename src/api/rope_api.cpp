// C entry points of the rotary position embedding family.
#include "api/entry.hpp"
#include "ops/rope/rope.hpp"
#include "util/error.hpp"

namespace {

// The ops layer's pair flag (1: interleaved pairs), after checking that `layout` is one of the
// enum's values (a C caller may pass any int).
int interleave_of(kjit_rope_layout layout) {
  if (layout != KJIT_ROPE_NEOX && layout != KJIT_ROPE_INTERLEAVED) {
    kjit::fail(KJIT_ERROR_INVALID_ARGUMENT,
               "layout must be KJIT_ROPE_NEOX (0) or KJIT_ROPE_INTERLEAVED (1), got {}",
               static_cast<int>(layout));
  }
  return layout == KJIT_ROPE_INTERLEAVED ? 1 : 0;
}

}  // namespace

extern "C" {

KJIT_API kjit_status kjit_apply_rope_pos_ids(const DLTensor* q, const DLTensor* k,
                                             const DLTensor* pos_ids, DLTensor* q_out,
                                             DLTensor* k_out, int rotary_dim,
                                             kjit_rope_layout layout, float rope_scale,
                                             float rope_theta, void* stream) {
  return kjit::api::entry<&kjit_apply_rope_pos_ids>(
      [&] {
        kjit::ops::apply_rope_pos_ids(q, k, q_out, k_out, pos_ids, rotary_dim,
                                      interleave_of(layout), rope_scale, rope_theta, stream);
      },
      q, k, pos_ids, q_out, k_out, rotary_dim, layout, rope_scale, rope_theta, stream);
}

KJIT_API kjit_status kjit_apply_llama31_rope_pos_ids(
    const DLTensor* q, const DLTensor* k, const DLTensor* pos_ids, DLTensor* q_out, DLTensor* k_out,
    int rotary_dim, kjit_rope_layout layout, float rope_scale, float rope_theta,
    float low_freq_factor, float high_freq_factor, float old_context_len, void* stream) {
  return kjit::api::entry<&kjit_apply_llama31_rope_pos_ids>(
      [&] {
        kjit::ops::apply_llama31_rope_pos_ids(
            q, k, q_out, k_out, pos_ids, rotary_dim, interleave_of(layout), rope_scale, rope_theta,
            low_freq_factor, high_freq_factor, old_context_len, stream);
      },
      q, k, pos_ids, q_out, k_out, rotary_dim, layout, rope_scale, rope_theta, low_freq_factor,
      high_freq_factor, old_context_len, stream);
}

KJIT_API kjit_status kjit_apply_rope_with_cos_sin_cache(const DLTensor* positions,
                                                        const DLTensor* cos_sin_cache, DLTensor* q,
                                                        DLTensor* k, int head_size,
                                                        kjit_rope_layout layout, void* stream) {
  return kjit::api::entry<&kjit_apply_rope_with_cos_sin_cache>(
      [&] {
        const int is_neox = 1 - interleave_of(layout);
        kjit::ops::apply_rope_with_cos_sin_cache(positions, q, k, head_size, cos_sin_cache, is_neox,
                                                 stream);
      },
      positions, cos_sin_cache, q, k, head_size, layout, stream);
}

KJIT_API kjit_status kjit_apply_rope(const DLTensor* q, const DLTensor* k, const DLTensor* indptr,
                                     const DLTensor* offsets, DLTensor* q_out, DLTensor* k_out,
                                     int rotary_dim, kjit_rope_layout layout, float rope_scale,
                                     float rope_theta, void* stream) {
  return kjit::api::entry<&kjit_apply_rope>(
      [&] {
        kjit::ops::apply_rope_indptr(q, k, q_out, k_out, indptr, offsets, rotary_dim,
                                     interleave_of(layout), rope_scale, rope_theta, stream);
      },
      q, k, indptr, offsets, q_out, k_out, rotary_dim, layout, rope_scale, rope_theta, stream);
}

KJIT_API kjit_status kjit_apply_llama31_rope(const DLTensor* q, const DLTensor* k,
                                             const DLTensor* indptr, const DLTensor* offsets,
                                             DLTensor* q_out, DLTensor* k_out, int rotary_dim,
                                             kjit_rope_layout layout, float rope_scale,
                                             float rope_theta, float low_freq_factor,
                                             float high_freq_factor, float old_context_len,
                                             void* stream) {
  return kjit::api::entry<&kjit_apply_llama31_rope>(
      [&] {
        kjit::ops::apply_llama31_rope_indptr(
            q, k, q_out, k_out, indptr, offsets, rotary_dim, interleave_of(layout), rope_scale,
            rope_theta, low_freq_factor, high_freq_factor, old_context_len, stream);
      },
      q, k, indptr, offsets, q_out, k_out, rotary_dim, layout, rope_scale, rope_theta,
      low_freq_factor, high_freq_factor, old_context_len, stream);
}

}  // extern "C"
