// C entry points of the attention family: decode and prefill plan / run, merging attention
// states.
#include <cstddef>
#include <new>

#include "api/entry.hpp"
#include "api/options.hpp"
#include "ops/attention/decode_attention.hpp"
#include "ops/attention/decode_tactics.hpp"
#include "ops/attention/merge_states.hpp"
#include "ops/attention/prefill.hpp"
#include "tune/process_tuner.hpp"
#include "util/error.hpp"

namespace {

// The plan behind a C handle (kjit_decode_plan, kjit_prefill_plan), or an error naming what is
// wrong with it.
template <class Plan>
const auto& plan_data(const Plan* plan, const char* type, const char* maker) {
  if (plan == nullptr) kjit::fail(KJIT_ERROR_INVALID_ARGUMENT, "plan is NULL");
  if (plan->magic != Plan::kMagic) {
    kjit::fail(KJIT_ERROR_INVALID_ARGUMENT, "plan is not a {} (destroyed, or not from {})", type,
               maker);
  }
  if (plan->version != Plan::kVersion) {
    kjit::fail(KJIT_ERROR_INVALID_ARGUMENT, "plan has version {}, this library reads version {}",
               plan->version, Plan::kVersion);
  }
  return plan->data;
}

const kjit::ops::DecodePlanData& plan_data(const kjit_decode_plan* plan) {
  return plan_data(plan, "kjit_decode_plan", "kjit_batch_decode_plan");
}

const kjit::ops::PrefillPlanData& plan_data(const kjit_prefill_plan* plan) {
  return plan_data(plan, "kjit_prefill_plan", "kjit_batch_prefill_plan");
}

// Whether plan points at a plan of its type that was not destroyed (the queries' NULL-safe test).
template <class Plan>
bool live(const Plan* plan) {
  return plan != nullptr && plan->magic == Plan::kMagic;
}

// Frees a plan; NULL is a no-op.
template <class Plan>
void destroy(Plan* plan) {
  if (plan == nullptr) return;
  plan->magic = 0;  // a later use of the dangling pointer is then refused, most of the time
  delete plan;
}

// The scalars both plan functions log.
struct PlanShape {
  int batch, num_qo_heads, num_kv_heads, head_dim, page_size;
  kjit_kv_layout layout;
  int device_id;
};

// A plan function's body under the guard: logs the shape and the options, reads the options
// (their struct_size), plans with make(options) and hands a new Plan holding the result to *plan
// (NULL on failure).
template <class Plan, class Options, class Make>
kjit_status make_plan(const char* fn, Plan** plan, const Options* options,
                      Options (*read_options)(const Options*), const PlanShape& s, Make&& make) {
  if (plan != nullptr) *plan = nullptr;
  return kjit::api::guarded(
      fn,
      [&](kjit::api::CallLog& log) {
        log.scalar("batch", s.batch).scalar("num_qo_heads", s.num_qo_heads);
        log.scalar("num_kv_heads", s.num_kv_heads).scalar("head_dim", s.head_dim);
        log.scalar("page_size", s.page_size).scalar("layout", static_cast<int>(s.layout));
        log.scalar("device_id", s.device_id);
        kjit::api::log_options(log, options);
      },
      [&] {
        if (plan == nullptr)
          kjit::fail(KJIT_ERROR_INVALID_ARGUMENT, "plan (the out pointer) is NULL");
        auto data = make(read_options(options));
        auto* p = new (std::nothrow) Plan;
        if (p == nullptr) kjit::fail(KJIT_ERROR_OUT_OF_MEMORY, "cannot allocate a plan");
        p->data = data;
        *plan = p;
      });
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
  options->autotune = -1;
  options->tune_timing = KJIT_TUNE_EAGER_COLD;
}

KJIT_API kjit_status kjit_batch_decode_plan(const int32_t* kv_indptr_host, int batch,
                                            int num_qo_heads, int num_kv_heads, int head_dim,
                                            int page_size, kjit_kv_layout layout,
                                            DLDataType q_dtype, DLDataType kv_dtype,
                                            const kjit_decode_options* options, int device_id,
                                            kjit_decode_plan** plan) {
  return make_plan(
      "kjit_batch_decode_plan", plan, options, &kjit::api::decode_options,
      PlanShape{batch, num_qo_heads, num_kv_heads, head_dim, page_size, layout, device_id},
      [&](const kjit_decode_options& o) {
        kjit::ops::DecodeTuneRequest tune;
        tune.req = kjit::tune::tune_request(o.autotune, o.tune_timing);
        return kjit::ops::plan_batch_decode(kv_indptr_host, batch, num_qo_heads, num_kv_heads,
                                            head_dim, page_size, layout, q_dtype, kv_dtype,
                                            o.sm_scale, o.logits_soft_cap, o.window_left,
                                            o.num_splits, o.num_sms, device_id, nullptr, &tune);
      });
}

KJIT_API size_t kjit_decode_plan_workspace_bytes(const kjit_decode_plan* plan) {
  return live(plan) ? plan->data.workspace_bytes : 0;
}

KJIT_API int kjit_decode_plan_num_splits(const kjit_decode_plan* plan) {
  return live(plan) ? plan->data.split.max_splits : 0;
}

KJIT_API const char* kjit_decode_plan_tactic(const kjit_decode_plan* plan) {
  return live(plan) ? plan->data.tactic : "";
}

KJIT_API void kjit_decode_plan_destroy(kjit_decode_plan* plan) {
  destroy(plan);
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

KJIT_API void kjit_prefill_options_init(kjit_prefill_options* options) {
  if (options == nullptr) return;
  *options = kjit_prefill_options{};
  options->struct_size = sizeof(kjit_prefill_options);
  options->causal = 1;
  options->sm_scale = 0.0f;
  options->logits_soft_cap = 0.0f;
  options->window_left = -1;
}

KJIT_API kjit_status kjit_batch_prefill_plan(const int32_t* qo_indptr_host,
                                             const int32_t* kv_indptr_host, int batch,
                                             int num_qo_heads, int num_kv_heads, int head_dim,
                                             int page_size, kjit_kv_layout layout,
                                             DLDataType q_dtype, DLDataType kv_dtype,
                                             const kjit_prefill_options* options, int device_id,
                                             kjit_prefill_plan** plan) {
  return make_plan(
      "kjit_batch_prefill_plan", plan, options, &kjit::api::prefill_options,
      PlanShape{batch, num_qo_heads, num_kv_heads, head_dim, page_size, layout, device_id},
      [&](const kjit_prefill_options& o) {
        return kjit::ops::plan_batch_prefill(qo_indptr_host, kv_indptr_host, batch, num_qo_heads,
                                             num_kv_heads, head_dim, page_size, layout, q_dtype,
                                             kv_dtype, o.causal, o.sm_scale, o.logits_soft_cap,
                                             o.window_left, device_id);
      });
}

KJIT_API size_t kjit_prefill_plan_workspace_bytes(const kjit_prefill_plan* plan) {
  return live(plan) ? plan->data.workspace_bytes : 0;
}

KJIT_API void kjit_prefill_plan_destroy(kjit_prefill_plan* plan) {
  destroy(plan);
}

KJIT_API kjit_status kjit_batch_prefill_run(const kjit_prefill_plan* plan, const DLTensor* q,
                                            const DLTensor* k_cache, const DLTensor* v_cache,
                                            const DLTensor* qo_indptr, const DLTensor* kv_indices,
                                            const DLTensor* kv_indptr,
                                            const DLTensor* kv_last_page_len, DLTensor* workspace,
                                            DLTensor* out, DLTensor* lse, float k_scale,
                                            float v_scale, void* stream) {
  return kjit::api::entry<&kjit_batch_prefill_run>(
      [&] {
        kjit::ops::batch_prefill_run(plan_data(plan), q, k_cache, v_cache, qo_indptr, kv_indices,
                                     kv_indptr, kv_last_page_len, workspace, out, lse, k_scale,
                                     v_scale, stream);
      },
      plan, q, k_cache, v_cache, qo_indptr, kv_indices, kv_indptr, kv_last_page_len, workspace, out,
      lse, k_scale, v_scale, stream);
}

KJIT_API kjit_status kjit_batch_prefill_ragged_run(const kjit_prefill_plan* plan, const DLTensor* q,
                                                   const DLTensor* k, const DLTensor* v,
                                                   const DLTensor* qo_indptr,
                                                   const DLTensor* kv_indptr, DLTensor* workspace,
                                                   DLTensor* out, DLTensor* lse, float k_scale,
                                                   float v_scale, void* stream) {
  return kjit::api::entry<&kjit_batch_prefill_ragged_run>(
      [&] {
        kjit::ops::batch_prefill_ragged_run(plan_data(plan), q, k, v, qo_indptr, kv_indptr,
                                            workspace, out, lse, k_scale, v_scale, stream);
      },
      plan, q, k, v, qo_indptr, kv_indptr, workspace, out, lse, k_scale, v_scale, stream);
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
