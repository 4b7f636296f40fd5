// Batch prefill / append attention: planning and the spec (prefill_plan.cpp), the checked launch
// over a paged or a ragged KV (prefill_run.cpp). Device code: kernels/attention/prefill.cuh; the
// registry entry, definitions and trace hook: prefill_desc.cpp.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

#include "cuda/tensor_map.hpp"
#include "jit/spec.hpp"
#include "ops/attention/decode_attention.hpp"
#include "ops/dtype.hpp"

namespace kjit::ops {

// The kernels a plan can run: the mma.sync kernel (kernels/attention/prefill.cuh, sm_80+) and the
// warp-specialized wgmma one (prefill_sm90.cuh: sm_90a, head_dim 64 and 128), the default on
// compute capability 9.0 where it serves the head size (PrefillTuning forces either).
enum class PrefillKernel { kMmaSm80 = 0, kWgmmaSm90a = 1 };

// One compiled prefill variant. Each field keeps its name in the URI, the generated kjit_spec
// constant and prefill_kernel's template parameter. Masks, window, soft cap, scales, page size,
// layout and strides are run-time values, so they share variants.
struct PrefillConfig {
  PrefillKernel kernel = PrefillKernel::kMmaSm80;
  DType dtype = DType::kBF16;  // q, k, v and out
  int head_dim = 128;
  int warps = 4;     // 16 query rows per warp (kWgmmaSm90a: its consumer warps)
  int kv_tile = 64;  // keys per pipeline stage
  int stages = 2;    // kWgmmaSm90a: K / V stages of its ring (the mma.sync kernel: always 2)
  // kWgmmaSm90a: 1 makes its consumer warpgroups take turns issuing their MMAs (prefill_sm90.cuh);
  // in the URI only when 1.
  int pingpong = 0;
  // kWgmmaSm90a: 1 runs its persistent form (prefill_sm90_persistent_kernel: min(CTA tiles, SMs)
  // CTAs walking the tiles, two Q buffers); not with pingpong. In the URI only when 1.
  int persistent = 0;
  // 1 when k and v are fp8 e4m3 (fp16 MMAs: kMmaSm80 over rows converted on their load,
  // prefill.cuh; kWgmmaSm90a over tiles its producer converts, not persistent or ping-pong); in
  // the URI only when 1.
  int kv_fp8 = 0;
};

// Query rows (packed (token, group member) pairs) one CTA owns.
int prefill_rows(const PrefillConfig& c);

// Internal (not C ABI) override of the planned kernel, for tests and `kjit-cli bench
// batch_prefill --set kernel=...`: -1 keeps the planned one; a kernel that cannot serve the plan
// is KJIT_ERROR_UNSUPPORTED.
struct PrefillTuning {
  int kernel = -1;     // a PrefillKernel
  int pingpong = 0;    // 1: the wgmma kernel's ping-pong schedule (kernel must be kWgmmaSm90a)
  int persistent = 0;  // 1: the wgmma kernel's persistent form (kernel kWgmmaSm90a, no pingpong)
  // The wgmma kernel's ring depth (K and V tiles in flight, 2 .. kPrefillMaxStages); 0 keeps the
  // plan's (2). Where the deeper ring does not fit the device's shared memory:
  // KJIT_ERROR_UNSUPPORTED.
  int stages = 0;
};

inline constexpr int kPrefillMaxStages = 6;

inline constexpr int kPrefillMaxGroup = 16;

// Shared memory the device sizes a CTA with (a mirror of PrefillSmem in prefill.cuh).
int prefill_smem_bytes(const PrefillConfig& c);

// Support and dispatch in one place: the variant for these dtypes and sizes on a device with
// this shared-memory budget (sm90a: a compute capability 9.0 device, which runs wgmma), or
// KJIT_ERROR_UNSUPPORTED saying why none serves them. `kernel` >= 0 asks for that kernel (a
// PrefillKernel); -1 takes the default. kv_fp8: k and v are fp8 e4m3 (the wgmma kernel at
// head_dim 64 and 128, the mma.sync one anywhere).
PrefillConfig select_prefill(DType dtype, int64_t head_dim, int64_t group, const SmemBudget& budget,
                             bool sm90a, int kernel = -1, bool kv_fp8 = false);

jit::Spec prefill_spec(const PrefillConfig& cfg);

// Everything a run needs from its plan.
struct PrefillPlanData {
  PrefillConfig cfg;
  int batch = 0;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int group = 0;
  int head_dim = 0;
  int page_size = 0;  // 0: a ragged KV (packed k / v, kv_indptr in rows)
  int layout = 0;
  int device = 0;
  int causal = 0;
  float sm_scale = 0.0f;
  float soft_cap = 0.0f;
  int window_left = -1;
  int64_t total_q = 0;   // qo_indptr_host[batch] - qo_indptr_host[0]: the rows of q
  int64_t tiles = 0;     // CTAs per kv head: each request's rows x group in tiles of prefill_rows
  int head_inner = 0;    // the CTA order (attention::prefill_cta): 1 where the grid is few waves
  int sms = 0;           // the device's SMs (0: no device at plan time): a persistent grid's bound
  int64_t kv_total = 0;  // the requests' pages (paged) or rows (ragged), as planned
  size_t workspace_bytes = 0;
};

// The plan's CTA order (PrefillPlanData::head_inner) for a grid of `ctas` CTAs on `sms` SMs (0:
// unknown).
bool prefill_head_inner(int64_t ctas, int sms);

// Validates and plans (see kjit_batch_prefill_plan). Throws kjit::Error.
PrefillPlanData plan_batch_prefill(const int32_t* qo_indptr_host, const int32_t* kv_indptr_host,
                                   int batch, int num_qo_heads, int num_kv_heads, int head_dim,
                                   int page_size, int layout, DLDataType q_dtype,
                                   DLDataType kv_dtype, int causal, float sm_scale,
                                   float logits_soft_cap, int window_left, int device_id,
                                   const PrefillTuning* tuning = nullptr);

// How the wgmma kernel loads K / V (attention_params.h, PrefillSm90Params): TMA boxes of
// box_rows keys for a ragged KV and for pages of a power-of-two size >= 8, else key by key.
int prefill_box_rows(const PrefillPlanData& plan);

// One of K / V (`shape` / `strides` in elements: [rows, heads, head_dim] ragged, [pages, slots,
// heads, head_dim] NHD or [pages, heads, slots, head_dim] HND, as checked by the run) as the
// wgmma kernel's 4-D TMA tensor: (head_dim, kv head, slot, page) for NHD and ragged keys (one page
// of all rows), (head_dim, slot, kv head, page) for HND; boxes of 64 x box_rows keys. False where
// the kernel cannot load it by boxes (page size, a box larger than the tensor, TMA's stride and
// alignment rules). Pure: no driver call.
bool prefill_kv_tma_view(const PrefillPlanData& plan, const void* data, const int64_t* shape,
                         const int64_t* strides, cuda::TensorMapNd& out);

// Validates, then launches on `stream` (kjit_batch_prefill_run). Throws kjit::Error.
void batch_prefill_run(const PrefillPlanData& plan, const DLTensor* q, const DLTensor* k_cache,
                       const DLTensor* v_cache, const DLTensor* qo_indptr,
                       const DLTensor* kv_indices, const DLTensor* kv_indptr,
                       const DLTensor* kv_last_page_len, DLTensor* workspace, DLTensor* out,
                       DLTensor* lse, float k_scale, float v_scale, void* stream);

// The ragged-KV run (kjit_batch_prefill_ragged_run). Throws kjit::Error.
void batch_prefill_ragged_run(const PrefillPlanData& plan, const DLTensor* q, const DLTensor* k,
                              const DLTensor* v, const DLTensor* qo_indptr,
                              const DLTensor* kv_indptr, DLTensor* workspace, DLTensor* out,
                              DLTensor* lse, float k_scale, float v_scale, void* stream);

}  // namespace kjit::ops

// The opaque plan of the C API: versioned so a stale or foreign pointer is refused, not used.
struct kjit_prefill_plan {
  static constexpr uint64_t kMagic = 0x6b6a69745f707265ull;  // "kjit_pre"
  static constexpr int kVersion = 1;
  uint64_t magic = kMagic;
  int version = kVersion;
  kjit::ops::PrefillPlanData data;
};
