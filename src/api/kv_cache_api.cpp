// C entry points of the paged KV cache family.
#include "api/entry.hpp"
#include "ops/kv_cache/kv_cache.hpp"
#include "util/error.hpp"

extern "C" {

KJIT_API kjit_status kjit_append_paged_kv_cache(
    const DLTensor* append_k, const DLTensor* append_v, const DLTensor* batch_indices,
    const DLTensor* positions, const DLTensor* kv_indices, const DLTensor* kv_indptr,
    const DLTensor* kv_last_page_len, DLTensor* paged_k_cache, DLTensor* paged_v_cache,
    kjit_kv_layout layout, void* stream) {
  return kjit::api::entry<&kjit_append_paged_kv_cache>(
      [&] {
        kjit::ops::append_paged_kv_cache(append_k, append_v, batch_indices, positions,
                                         paged_k_cache, paged_v_cache, kv_indices, kv_indptr,
                                         kv_last_page_len, layout, stream);
      },
      append_k, append_v, batch_indices, positions, kv_indices, kv_indptr, kv_last_page_len,
      paged_k_cache, paged_v_cache, layout, stream);
}

KJIT_API kjit_status kjit_append_paged_kv_cache_fp8(
    const DLTensor* append_k, const DLTensor* append_v, const DLTensor* batch_indices,
    const DLTensor* positions, const DLTensor* kv_indices, const DLTensor* kv_indptr,
    const DLTensor* kv_last_page_len, const DLTensor* k_scale, const DLTensor* v_scale,
    DLTensor* paged_k_cache, DLTensor* paged_v_cache, kjit_kv_layout layout, void* stream) {
  return kjit::api::entry<&kjit_append_paged_kv_cache_fp8>(
      [&] {
        if (k_scale == nullptr || v_scale == nullptr) {
          kjit::fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is NULL",
                     k_scale == nullptr ? "k_scale" : "v_scale");
        }
        kjit::ops::append_paged_kv_cache(
            append_k, append_v, batch_indices, positions, paged_k_cache, paged_v_cache, kv_indices,
            kv_indptr, kv_last_page_len, layout, stream, kjit::ops::elementwise_launch_from_env(),
            {k_scale, v_scale});
      },
      append_k, append_v, batch_indices, positions, kv_indices, kv_indptr, kv_last_page_len,
      k_scale, v_scale, paged_k_cache, paged_v_cache, layout, stream);
}

}  // extern "C"
