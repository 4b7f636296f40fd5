// C entry points of the attention family: decode plan / run and merging attention states.
#include <cstddef>
#include <new>

#include "api/entry.hpp"
#include "api/options.hpp"
#include "ops/attention/decode_attention.hpp"
#include "ops/attention/merge_states.hpp"
#include "util/error.hpp"

namespace {

// The plan behind a C handle, or an error naming what is wrong with it.
const kjit::ops::DecodePlanData& plan_data(const kjit_decode_plan* plan) {
  if (plan == nullptr) kjit::fail(KJIT_ERROR_INVALID_ARGUMENT, "plan is NULL");
  if (plan->magic != kjit_decode_plan::kMagic) {
    kjit::fail(KJIT_ERROR_INVALID_ARGUMENT,
               "plan is not a kjit_decode_plan (destroyed, or not from kjit_batch_decode_plan)");
  }
  if (plan->version != kjit_decode_plan::kVersion) {
    kjit::fail(KJIT_ERROR_INVALID_ARGUMENT, "plan has version {}, this library reads version {}",
               plan->version, kjit_decode_plan::kVersion);
  }
  return plan->data;
}

}  // namespace

extern "C" {

KJIT_API void kjit_decode_options_init(kjit_decode_options* options) {
  if (options == nullptr) return;
  *options = kjit_decode_options{};
  options->struct_size = sizeof(kjit_decode_options);
  options->sm_scale = 0.0f;
  options->logits_soft_cap = 0.0f;
  options->window_left = -1;
  options->num_splits = 0;
  options->num_sms = 0;
}

KJIT_API kjit_status kjit_batch_decode_plan(const int32_t* kv_indptr_host, int batch,
                                            int num_qo_heads, int num_kv_heads, int head_dim,
                                            int page_size, kjit_kv_layout layout,
                                            DLDataType q_dtype, DLDataType kv_dtype,
                                            const kjit_decode_options* options, int device_id,
                                            kjit_decode_plan** plan) {
  if (plan != nullptr) *plan = nullptr;
  return kjit::api::guarded(
      "kjit_batch_decode_plan",
      [&](kjit::api::CallLog& log) {
        log.scalar("batch", batch).scalar("num_qo_heads", num_qo_heads);
        log.scalar("num_kv_heads", num_kv_heads).scalar("head_dim", head_dim);
        log.scalar("page_size", page_size).scalar("layout", static_cast<int>(layout));
        log.scalar("device_id", device_id);
        kjit::api::log_options(log, options);
      },
      [&] {
        if (plan == nullptr)
          kjit::fail(KJIT_ERROR_INVALID_ARGUMENT, "plan (the out pointer) is NULL");
        const kjit_decode_options o = kjit::api::decode_options(options);
        kjit::ops::DecodePlanData data = kjit::ops::plan_batch_decode(
            kv_indptr_host, batch, num_qo_heads, num_kv_heads, head_dim, page_size, layout, q_dtype,
            kv_dtype, o.sm_scale, o.logits_soft_cap, o.window_left, o.num_splits, o.num_sms,
            device_id);
        auto* p = new (std::nothrow) kjit_decode_plan;
        if (p == nullptr) kjit::fail(KJIT_ERROR_OUT_OF_MEMORY, "cannot allocate a plan");
        p->data = data;
        *plan = p;
      });
}

KJIT_API size_t kjit_decode_plan_workspace_bytes(const kjit_decode_plan* plan) {
  return plan != nullptr && plan->magic == kjit_decode_plan::kMagic ? plan->data.workspace_bytes
                                                                    : 0;
}

KJIT_API int kjit_decode_plan_num_splits(const kjit_decode_plan* plan) {
  return plan != nullptr && plan->magic == kjit_decode_plan::kMagic ? plan->data.split.max_splits
                                                                    : 0;
}

KJIT_API void kjit_decode_plan_destroy(kjit_decode_plan* plan) {
  if (plan == nullptr) return;
  plan->magic = 0;  // a later use of the dangling pointer is then refused, most of the time
  delete plan;
}

KJIT_API kjit_status kjit_batch_decode_run(const kjit_decode_plan* plan, const DLTensor* q,
                                           const DLTensor* k_cache, const DLTensor* v_cache,
                                           const DLTensor* kv_indices, const DLTensor* kv_indptr,
                                           const DLTensor* kv_last_page_len, DLTensor* workspace,
                                           DLTensor* out, DLTensor* lse, float k_scale,
                                           float v_scale, void* stream) {
  return kjit::api::entry<&kjit_batch_decode_run>(
      [&] {
        kjit::ops::batch_decode_run(plan_data(plan), q, k_cache, v_cache, kv_indices, kv_indptr,
                                    kv_last_page_len, workspace, out, lse, k_scale, v_scale,
                                    stream);
      },
      plan, q, k_cache, v_cache, kv_indices, kv_indptr, kv_last_page_len, workspace, out, lse,
      k_scale, v_scale, stream);
}

KJIT_API kjit_status kjit_merge_states(const DLTensor* v_a, const DLTensor* s_a,
                                       const DLTensor* v_b, const DLTensor* s_b, DLTensor* v_out,
                                       DLTensor* s_out, void* stream) {
  return kjit::api::entry<&kjit_merge_states>(
      [&] { kjit::ops::merge_states(v_a, s_a, v_b, s_b, v_out, s_out, stream); }, v_a, s_a, v_b,
      s_b, v_out, s_out, stream);
}

KJIT_API kjit_status kjit_merge_states_n(const DLTensor* v, const DLTensor* s, DLTensor* v_out,
                                         DLTensor* s_out, void* stream) {
  return kjit::api::entry<&kjit_merge_states_n>(
      [&] { kjit::ops::merge_states_n(v, s, v_out, s_out, stream); }, v, s, v_out, s_out, stream);
}

}  // extern "C"
