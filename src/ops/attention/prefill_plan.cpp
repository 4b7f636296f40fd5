// Prefill attention's planning: the variant for the dtypes and sizes (select_prefill), its spec,
// and the plan of a batch (plan_batch_prefill). Pure host code apart from the device queries.
#include <climits>
#include <cmath>
#include <string>

#include "attention/attention_params.h"
#include "cuda/device.hpp"
#include "ops/attention/attention_common.hpp"
#include "ops/attention/decode_internal.hpp"
#include "ops/attention/prefill.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

// Host indptr arrays: batch + 1 values, non-decreasing from >= 0. Returns the last minus the
// first.
int64_t check_indptr(const int32_t* indptr, int batch, const char* name) {
  if (batch == 0) return 0;
  if (indptr == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is NULL", name);
  if (indptr[0] < 0)
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{}[0] must be >= 0, got {}", name, indptr[0]);
  for (int b = 0; b < batch; ++b) {
    if (indptr[b + 1] < indptr[b]) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} decreases at {}: {} then {}", name, b + 1, indptr[b],
           indptr[b + 1]);
    }
  }
  return static_cast<int64_t>(indptr[batch]) - indptr[0];
}

// q's dtype, and whether k and v are fp8 e4m3 (else they are q's dtype).
DType check_dtypes(DLDataType q_dtype, DLDataType kv_dtype, bool& kv_fp8) {
  using decode_detail::dl_name;
  const auto qd = dtype_of(q_dtype);
  if (!qd || !is_float(*qd)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "q_dtype {} is not a float dtype", dl_name(q_dtype));
  }
  kv_fp8 = decode_detail::is_e4m3(kv_dtype);
  const auto kd = dtype_of(kv_dtype);
  if (!kv_fp8 && (!kd || !is_float(*kd))) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "kv_dtype {} is not a float dtype", dl_name(kv_dtype));
  }
  if (kv_fp8 ? *qd != DType::kBF16 && *qd != DType::kF16 : (!kd || *kd != *qd)) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "prefill attention needs kv_dtype = q_dtype, or fp8 e4m3 with bf16 / fp16 q, not {} "
         "with {} q",
         dl_name(kv_dtype), dtype_name(*qd));
  }
  return *qd;
}

}  // namespace

int prefill_rows(const PrefillConfig& c) {
  return c.kernel == PrefillKernel::kWgmmaSm90a ? attention::kPrefillSm90Rows : 16 * c.warps;
}

int prefill_smem_bytes(const PrefillConfig& c) {
  if (c.kernel == PrefillKernel::kWgmmaSm90a) {
    // PrefillSm90Smem: Q (two buffers in the persistent form), the ring's K and V tiles, 1024
    // bytes to align the first.
    // fp8 keys and values: a raw e4m3 tile each for K and V beside (produce_fp8's staging).
    const int q_bufs = c.persistent != 0 ? 2 : 1;
    const int raw = c.kv_fp8 != 0 ? 2 * c.kv_tile * c.head_dim : 0;
    return (q_bufs * attention::kPrefillSm90Rows + 2 * c.stages * c.kv_tile) * c.head_dim * 2 +
           raw + 1024;
  }
  return (16 * c.warps + 4 * c.kv_tile) * c.head_dim * 2;
}

PrefillConfig select_prefill(DType dtype, int64_t head_dim, int64_t group, const SmemBudget& budget,
                             bool sm90a, int kernel, bool kv_fp8) {
  attention_detail::check_attention_support("prefill attention", dtype, head_dim, group,
                                            kPrefillMaxGroup);
  if (kernel != -1 && kernel != static_cast<int>(PrefillKernel::kMmaSm80) &&
      kernel != static_cast<int>(PrefillKernel::kWgmmaSm90a)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "prefill kernel {} is none of mma_sm80 (0), wgmma_sm90a (1)",
         kernel);
  }
  if (kv_fp8 && head_dim == 256 && kernel == static_cast<int>(PrefillKernel::kWgmmaSm90a)) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "the wgmma prefill kernel takes fp8 keys and values at head_dim 64 and 128 (at 256 its "
         "raw fp8 tiles do not fit beside the ring); the mma.sync one takes 256");
  }
  // The wgmma kernel serves head_dim 64, 128 and 256 and runs only on compute capability 9.0
  // (sm_90a code). It is the default there (kernel -1): on the H200 it runs 8k causal prefill at
  // 548 TFLOP/s, the mma.sync kernel at 174 (docs/performance.md); elsewhere, and where its shared
  // memory does not fit, the mma.sync kernel.
  // Its config: 128 query rows over 128-key tiles in a 2-stage ring: 160 KB at head_dim 128, one
  // CTA per SM, two consumer warpgroups of 64 rows. At head_dim 256 the tiles hold 64 keys (O
  // alone takes 128 accumulator registers a thread; S and P of 64 keys fit beside it): 193 KB, and
  // no room for the persistent form's second Q buffer.
  PrefillConfig w;
  w.kernel = PrefillKernel::kWgmmaSm90a;
  w.dtype = dtype;
  w.head_dim = static_cast<int>(head_dim);
  w.warps = 8;
  w.kv_tile = head_dim == 256 ? 64 : 128;
  w.stages = 2;
  w.kv_fp8 = kv_fp8 ? 1 : 0;
  // Every head_dim check_attention_support lets through (64, 128, 256) has a wgmma form.
  const bool fits_wgmma = prefill_smem_bytes(w) <= budget.per_block;
  // fp8 keys and values: the wgmma kernel's fp8 form (each tile converted by its producer, fp16
  // MMAs) at head_dim 64 and 128, 1.58x the mma.sync kernel's at 8k causal and 1.59x without a
  // mask (H100, 2026-12-07); at 256, and off compute capability 9.0, the mma.sync kernel (fp16
  // MMAs over rows converted on their load).
  const bool want_wgmma = kernel == static_cast<int>(PrefillKernel::kWgmmaSm90a) ||
                          (kernel == -1 && sm90a && fits_wgmma && !(kv_fp8 && head_dim == 256));
  if (want_wgmma && !sm90a) {
    fail(KJIT_ERROR_UNSUPPORTED, "the wgmma prefill kernel runs on compute capability 9.0 only");
  }
  PrefillConfig c;
  c.dtype = dtype;
  c.head_dim = static_cast<int>(head_dim);
  c.kv_fp8 = kv_fp8 ? 1 : 0;
  if (want_wgmma) {
    c = w;
  } else if (head_dim == 256) {
    // 128 query rows (8 warps) over 64-key tiles: 96 KB at head_dim 128, two CTAs per H100 /
    // H200 SM. At 256 the O accumulator alone takes 128 registers a thread, so 64 rows over
    // 32-key tiles (also 96 KB).
    c.warps = 4;
    c.kv_tile = 32;
  } else {
    c.warps = 8;
    c.kv_tile = 64;
  }
  if (prefill_smem_bytes(c) > budget.per_block) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "prefill attention head_dim {} needs {} bytes of shared memory per CTA; the device "
         "allows {}",
         head_dim, prefill_smem_bytes(c), budget.per_block);
  }
  return c;
}

jit::Spec prefill_spec(const PrefillConfig& c) {
  if (c.kernel == PrefillKernel::kWgmmaSm90a) {
    jit::SpecBuilder b("prefill_attention", {"common", "attention"}, "attention/prefill_sm90.cuh",
                       {"sm_90a"});
    b.choice("kernel", "wgmma", static_cast<int>(c.kernel));
    b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
    b.value("head_dim", c.head_dim).value("kv_tile", c.kv_tile).value("stages", c.stages);
    b.value("pingpong", c.pingpong, /*uri_default=*/0);
    b.value("persistent", c.persistent, /*uri_default=*/0);
    if (c.persistent != 0) {
      b.entry("kjit::attention::prefill_sm90_persistent_kernel",
              {"dtype", "head_dim", "kv_tile", "stages"});
    } else if (c.kv_fp8 != 0) {
      // fp8 e4m3 keys and values: fp16 MMAs over tiles the producer converts.
      b.type("mma_dtype", "fp16", "__half");
      b.value("kv_fp8", 1);
      b.entry("kjit::attention::prefill_sm90_kernel",
              {"dtype", "head_dim", "kv_tile", "stages", "pingpong", "mma_dtype", "kv_fp8"});
    } else {
      b.entry("kjit::attention::prefill_sm90_kernel",
              {"dtype", "head_dim", "kv_tile", "stages", "pingpong"});
    }
    return b.build();
  }
  jit::SpecBuilder b("prefill_attention", {"common", "attention"}, "attention/prefill.cuh",
                     {"sm_80+"});
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.value("head_dim", c.head_dim).value("warps", c.warps).value("kv_tile", c.kv_tile);
  if (c.kv_fp8 != 0) {
    // fp8 e4m3 keys and values: fp16 MMAs (prefill.cuh); 16-bit caches keep their URIs.
    b.type("mma_dtype", "fp16", "__half");
    b.value("kv_fp8", 1);
    b.entry("kjit::attention::prefill_kernel",
            {"dtype", "head_dim", "warps", "kv_tile", "mma_dtype", "kv_fp8"});
  } else {
    b.entry("kjit::attention::prefill_kernel");
  }
  return b.build();
}

bool prefill_head_inner(int64_t ctas, int sms) {
  // The heads' longest tiles first where the grid is at most four waves (an H100 with the head
  // inner: 2k causal 9% faster, the mma.sync kernel's 17%); the heads one after another above that
  // (8k causal paged and 16 ragged requests 1.5% faster: the running CTAs share a head's keys in
  // L2). A wave is one CTA an SM: the wgmma kernel's 384 threads fill the register file, and so do
  // the mma.sync kernel's 256 at head_dim 128 (224 registers each). Without a device (sms 0) the
  // heads go one by one.
  return sms > 0 && ctas <= 4 * int64_t{sms};
}

PrefillPlanData plan_batch_prefill(const int32_t* qo_indptr_host, const int32_t* kv_indptr_host,
                                   int batch, int num_qo_heads, int num_kv_heads, int head_dim,
                                   int page_size, int layout, DLDataType q_dtype,
                                   DLDataType kv_dtype, int causal, float sm_scale,
                                   float logits_soft_cap, int window_left, int device_id,
                                   const PrefillTuning* tuning) {
  if (batch < 0) fail(KJIT_ERROR_INVALID_ARGUMENT, "batch must be >= 0, got {}", batch);
  attention_detail::check_head_counts(num_qo_heads, num_kv_heads, head_dim);
  if (page_size < 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "page_size must be >= 1 (paged) or 0 (ragged KV), got {}",
         page_size);
  }
  if (page_size > 0 && layout != KJIT_KV_LAYOUT_NHD && layout != KJIT_KV_LAYOUT_HND) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "layout must be KJIT_KV_LAYOUT_NHD (0) or _HND (1), got {}",
         layout);
  }
  bool kv_fp8 = false;
  const DType dt = check_dtypes(q_dtype, kv_dtype, kv_fp8);
  if (causal != 0 && causal != 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "causal must be 0 or 1, got {}", causal);
  }
  attention_detail::check_score_options(sm_scale, logits_soft_cap, window_left);
  if (device_id < 0) fail(KJIT_ERROR_INVALID_ARGUMENT, "device_id must be >= 0, got {}", device_id);
  const int64_t total_q = check_indptr(qo_indptr_host, batch, "qo_indptr_host");
  const int64_t kv_total = check_indptr(kv_indptr_host, batch, "kv_indptr_host");

  // The SM count picks the CTA order (prefill_head_inner); a driverless plan assumes an
  // H100 / H200-class shared-memory budget, and the run's launch is checked on the device.
  // (device_budget's SM count of 1 only keeps a driverless plan from failing; the plan's `sms`
  // is the device's own, or 0 without one.)
  SmemBudget budget;
  int sms = 0;
  bool sm90a = false;
  int budget_sms = 0;
  if (attention_detail::device_budget(device_id, 1, &budget, &budget_sms)) {
    const cuda::DeviceInfo& info = cuda::device_info(device_id);
    sm90a = info.major == 9 && info.minor == 0;
    sms = info.sm_count;
  }

  const int64_t group = num_qo_heads / num_kv_heads;
  if (kv_fp8 && tuning != nullptr && (tuning->pingpong != 0 || tuning->persistent != 0)) {
    // Before the kernel's selection, so the refusal does not depend on the device.
    fail(KJIT_ERROR_UNSUPPORTED,
         "fp8 keys and values take the mma.sync or the plain wgmma prefill kernel, not {} (the "
         "persistent form's second Q buffer and the raw fp8 tiles do not fit together)",
         tuning->pingpong != 0 ? "the ping-pong schedule" : "the persistent form");
  }
  PrefillPlanData pl;
  pl.cfg = select_prefill(dt, head_dim, group, budget, sm90a, tuning ? tuning->kernel : -1, kv_fp8);
  if (tuning != nullptr && tuning->pingpong != 0) {
    if (tuning->pingpong != 1 || pl.cfg.kernel != PrefillKernel::kWgmmaSm90a) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "the ping-pong schedule (1) is the wgmma prefill kernel's, not pingpong {} on {}",
           tuning->pingpong, pl.cfg.kernel == PrefillKernel::kWgmmaSm90a ? "wgmma" : "mma.sync");
    }
    pl.cfg.pingpong = 1;
  }
  if (tuning != nullptr && tuning->stages != 0) {
    if (tuning->stages < 2 || tuning->stages > kPrefillMaxStages ||
        pl.cfg.kernel != PrefillKernel::kWgmmaSm90a) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "the ring depth (stages 2 .. {}) is the wgmma prefill kernel's, not stages {} on {}",
           kPrefillMaxStages, tuning->stages,
           pl.cfg.kernel == PrefillKernel::kWgmmaSm90a ? "wgmma" : "mma.sync");
    }
    pl.cfg.stages = tuning->stages;
  }
  if (tuning != nullptr && tuning->persistent != 0) {
    if (tuning->persistent != 1 || pl.cfg.kernel != PrefillKernel::kWgmmaSm90a ||
        pl.cfg.pingpong != 0) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "the persistent form (1) is the wgmma prefill kernel's without ping-pong, not "
           "persistent {} on {}{}",
           tuning->persistent, pl.cfg.kernel == PrefillKernel::kWgmmaSm90a ? "wgmma" : "mma.sync",
           pl.cfg.pingpong != 0 ? " with ping-pong" : "");
    }
    pl.cfg.persistent = 1;
    if (prefill_smem_bytes(pl.cfg) > budget.per_block) {
      fail(KJIT_ERROR_UNSUPPORTED,
           "the persistent wgmma prefill kernel needs {} bytes of shared memory per CTA; the "
           "device allows {}",
           prefill_smem_bytes(pl.cfg), budget.per_block);
    }
  }
  pl.batch = batch;
  pl.num_qo_heads = num_qo_heads;
  pl.num_kv_heads = num_kv_heads;
  pl.group = static_cast<int>(group);
  pl.head_dim = head_dim;
  pl.page_size = page_size;
  pl.layout = page_size > 0 ? layout : KJIT_KV_LAYOUT_NHD;
  pl.device = device_id;
  pl.causal = causal;
  pl.sm_scale = sm_scale > 0.0f ? sm_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  pl.soft_cap = logits_soft_cap;
  pl.window_left = window_left;
  pl.total_q = total_q;
  pl.kv_total = kv_total;
  if (total_q * group > INT_MAX) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "prefill attention supports up to {} (query token, group member) rows, got {} x {}",
         INT_MAX, total_q, group);
  }
  const int64_t rows = prefill_rows(pl.cfg);
  for (int b = 0; b < batch; ++b) {
    const int64_t len = static_cast<int64_t>(qo_indptr_host[b + 1]) - qo_indptr_host[b];
    pl.tiles += (len * group + rows - 1) / rows;
  }
  if (pl.tiles * num_kv_heads > INT_MAX) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "prefill attention launches up to {} CTAs (tiles of {} rows x kv heads), got {} x {}",
         INT_MAX, rows, pl.tiles, num_kv_heads);
  }
  if (pl.cfg.kernel == PrefillKernel::kWgmmaSm90a && pl.cfg.persistent == 0 &&
      pl.cfg.pingpong == 0 && pl.cfg.kv_fp8 == 0 && (tuning == nullptr || tuning->kernel < 0) &&
      (causal != 0 || prefill_head_inner(pl.tiles * num_kv_heads, sms))) {
    // The persistent form where its second Q buffer fits. A causal mask gives tiles of many
    // costs, which CTAs walking the tiles (head-innermost, a band an SM) pair up better than one
    // CTA a tile: H200, 2026-12-06, 1.17x at 2k causal, 1.14x on a ragged batch of 16 over pages,
    // 1.08x at 8k causal. Without a mask every tile costs the same and the two forms ran even at
    // 8k (0.99x, 15.5 waves), but where the grid is a few waves each CTA's start and end (Q load,
    // pipeline fill, O store) is a visible share of its tile, which the persistent form hides
    // under the previous tile: H100, 2k (3.9 waves) 139.1 -> 132.9 us (1.05x; 1.03x in
    // 2026-12-05's call).
    PrefillConfig c = pl.cfg;
    c.persistent = 1;
    if (prefill_smem_bytes(c) <= budget.per_block) pl.cfg = c;
  }
  if (tuning != nullptr && tuning->stages != 0) {
    // The ring's barriers, validity and key offsets (PrefillRing) are static shared memory
    // beside the tiles.
    const int s = pl.cfg.stages, kv = pl.cfg.kv_tile;
    const int ring = 32 * s + s * kv + 16 * s + 32 * kv;
    if (prefill_smem_bytes(pl.cfg) + ring > budget.per_block) {
      fail(KJIT_ERROR_UNSUPPORTED,
           "the wgmma prefill kernel with {} stages of {}-key tiles at head_dim {} needs {} bytes "
           "of shared memory per CTA; the device allows {}",
           s, kv, head_dim, prefill_smem_bytes(pl.cfg) + ring, budget.per_block);
    }
  }
  // The persistent form walks the order in bands of one CTA an SM (a snake): head-innermost keeps
  // tiles of one cost together, so a band's long and short causal tiles pair up. Head-outer
  // bands straddle heads' ends, and 8k causal ran 31% slower for it (H100, 2026-12-05).
  pl.head_inner =
      pl.cfg.persistent != 0 || prefill_head_inner(pl.tiles * num_kv_heads, sms) ? 1 : 0;
  pl.sms = sms;
  return pl;
}

}  // namespace kjit::ops
