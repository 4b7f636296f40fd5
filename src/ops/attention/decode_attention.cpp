#include "ops/attention/decode_attention.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <mutex>
#include <unordered_set>
#include <utility>

#include "attention/attention_params.h"
#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "cuda/launch.hpp"
#include "jit/jit_core.hpp"
#include "ops/tensor.hpp"
#include "diag/trace_dump.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using attention::DecodeParams;

constexpr float kLog2e = 1.4426950408889634f;
// fp8 values enter the mma scaled by 2^-8 (mma_sm80.cuh); the scales take the 2^8 back.
constexpr float kFp8Unscale = 256.0f;
constexpr int kDLFloat8E4m3fn = 10;  // DLPack 1.1's kDLFloat8_e4m3fn (not in older headers)

bool is_e4m3(DLDataType t) {
  return t.lanes == 1 && t.bits == 8 && (t.code == kDLFloat8E4m3fn || t.code == kDLUInt);
}

std::string dl_name(DLDataType t) {
  if (is_e4m3(t)) return "fp8 e4m3";
  if (auto d = dtype_of(t)) return dtype_name(*d);
  return fmt::format("(code {}, bits {}, lanes {})", t.code, t.bits, t.lanes);
}

// Warps and tokens per stage: 16 tokens per warp tile, ~32 KB of K + V per stage (a 256-wide
// head gets two warps so that a stage stays at 32 KB).
void geometry(int head_dim, int& warps, int& stage_tokens) {
  switch (head_dim) {
    case 64: warps = 4, stage_tokens = 128; break;
    case 128: warps = 4, stage_tokens = 64; break;
    default: warps = 2, stage_tokens = 32; break;
  }
}

int int_arg_or(const SetArgs& a, const std::string& name, int fallback) {
  auto it = a.find(name);
  return it == a.end() ? fallback : std::stoi(it->second);
}

SmemBudget budget_for_class(int per_sm_kb) {
  SmemBudget b;
  b.per_sm = per_sm_kb * 1024;
  b.per_block = per_sm_kb * 1024 - 1024;
  b.reserved = 1024;
  return b;
}

// ---- Run-time argument checks -------------------------------------------------------------------

StridedView int_vector(const DLTensor* t, const char* name, int device) {
  StridedView v = as_strided_view(t, name);
  if (v.ndim != 1) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be 1-D, got ndim {}", name, v.ndim);
  if (v.dtype != DType::kI32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be int32, got {}", name, dtype_name(v.dtype));
  }
  if (v.shape[0] > 1 && v.strides[0] != 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be contiguous, has stride {}", name, v.strides[0]);
  }
  if (v.device != device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on cuda:{} but the plan is for cuda:{}", name,
         v.device, device);
  }
  return v;
}

void check_device(const StridedView& v, const char* name, int device) {
  if (v.device != device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on cuda:{} but the plan is for cuda:{}", name,
         v.device, device);
  }
}

// A cache as a strided view. An fp8 cache is seen as 16-bit pairs (last dim and strides halved)
// so the generic view checks, alignment and overlap tests apply to its bytes; *elem_scale is then
// 2 (view strides times 2 = fp8 element strides).
StridedView cache_view(const DLTensor* t, const char* name, const DecodePlanData& pl,
                       int* elem_scale) {
  if (t == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is NULL", name);
  const bool fp8 = pl.cfg.kv_fp8 != 0;
  const bool t_fp8 = is_e4m3(t->dtype);
  if (fp8 != t_fp8) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is {} but the plan's kv dtype is {}", name,
         dl_name(t->dtype), dl_name(pl.kv_dtype));
  }
  *elem_scale = 1;
  if (!fp8) {
    StridedView v = as_strided_view(t, name);
    if (v.dtype != pl.cfg.q_dtype) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is {} but the plan's kv dtype is {}", name,
           dtype_name(v.dtype), dl_name(pl.kv_dtype));
    }
    return v;
  }
  if (t->ndim != 4 || t->shape == nullptr) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be 4-D, got ndim {}", name, t->ndim);
  }
  if (t->shape[3] != pl.head_dim) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has head_dim {} but the plan has {}", name, t->shape[3],
         pl.head_dim);
  }
  DLTensor pair = *t;
  int64_t shape[4], strides[4];
  for (int i = 0; i < 4; ++i) shape[i] = t->shape[i];
  shape[3] /= 2;
  if (t->strides != nullptr) {
    for (int i = 0; i < 4; ++i) {
      const int64_t s = t->strides[i];
      if (i == 3) {
        if (t->shape[3] > 1 && s != 1) {
          fail(KJIT_ERROR_INVALID_ARGUMENT, "{} last dim has stride {} (must be contiguous)", name,
               s);
        }
        strides[3] = 1;
      } else {
        if (t->shape[i] > 1 && s % 2 != 0) {
          fail(KJIT_ERROR_UNSUPPORTED,
               "{} dim {} has an odd stride {}: fp8 cache rows must be "
               "at least 4-byte aligned",
               name, i, s);
        }
        strides[i] = s / 2;
      }
    }
    pair.strides = strides;
  }
  pair.shape = shape;
  pair.dtype = DLDataType{kDLBfloat, 16, 1};
  if ((reinterpret_cast<uintptr_t>(t->data) + t->byte_offset) % 2 != 0) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "{} data is not 2-byte aligned: fp8 cache rows must be at least "
         "4-byte aligned",
         name);
  }
  *elem_scale = 2;
  return as_strided_view(&pair, name);
}

// The workspace as the int32 view of the bytes the plan uses.
StridedView workspace_view(const DLTensor* t, const DecodePlanData& pl) {
  if (t == nullptr) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace is NULL but the plan needs {} bytes",
         pl.workspace_bytes);
  }
  if (t->device.device_type != kDLCUDA && t->device.device_type != kDLCUDAManaged) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace is on device type {} (expected kDLCUDA)",
         static_cast<int>(t->device.device_type));
  }
  if (t->device.device_id != pl.device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace is on cuda:{} but the plan is for cuda:{}",
         t->device.device_id, pl.device);
  }
  if (t->ndim < 1 || t->ndim > kMaxDims || t->shape == nullptr) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace has ndim {} (expected 1..{})", t->ndim, kMaxDims);
  }
  if (t->dtype.lanes != 1 || t->dtype.bits == 0 || t->dtype.bits % 8 != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace has a dtype of {} bits x {} lanes", t->dtype.bits,
         t->dtype.lanes);
  }
  int64_t numel = 1, expect = 1;
  bool compact = true;
  for (int i = t->ndim - 1; i >= 0; --i) {
    const int64_t s = t->shape[i];
    if (s < 0) fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace has negative dim {} = {}", i, s);
    if (t->strides != nullptr && s > 1 && t->strides[i] != expect) compact = false;
    if (s > 0 && numel > (INT64_MAX / 16) / s) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace is too large to address");
    }
    numel *= s;
    expect *= s;
  }
  if (!compact) fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace must be contiguous");
  const uint64_t bytes = static_cast<uint64_t>(numel) * (t->dtype.bits / 8);
  if (bytes < pl.workspace_bytes) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace has {} bytes but the plan needs {}", bytes,
         pl.workspace_bytes);
  }
  if (t->data == nullptr) fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace data is NULL");
  char* data = reinterpret_cast<char*>(data_address(t, "workspace"));
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace must be 16-byte aligned");
  }
  StridedView v;
  v.data = data;
  v.dtype = DType::kI32;
  v.device = pl.device;
  v.ndim = 1;
  v.shape[0] = static_cast<int64_t>(pl.workspace_bytes / 4);
  v.strides[0] = 1;
  return v;
}

// The view of an absent optional tensor: no elements, so it overlaps nothing.
StridedView no_view() {
  StridedView v;
  v.ndim = 1;
  v.shape[0] = 0;
  return v;
}

// Asks for the whole unified L1 / shared array as shared memory, once per kernel: two CTAs of
// ~100 KB per SM is the design point, and the driver's default carveout choice need not allow
// it. The kernel reads almost nothing through L1 (cp.async.cg bypasses it).
void prefer_max_shared(CUfunction fn) {
  static std::mutex mu;
  static std::unordered_set<CUfunction> done;
  std::lock_guard<std::mutex> lock(mu);
  if (!done.insert(fn).second) return;
  KJIT_CU_CHECK(cuda::driver().cuFuncSetAttribute(
      fn, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100));
}

void check_scale(float x, const char* name) {
  if (!std::isfinite(x) || x <= 0.0f) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be finite and > 0, got {}", name, x);
  }
}

}  // namespace

// ---- Specialization
// ------------------------------------------------------------------------------

int decode_smem_bytes(const DecodeConfig& c) {
  const int kv_bytes = c.kv_fp8 ? 1 : 2;
  const int d = c.head_dim, ts = c.stage_tokens, st = c.stages;
  const int hp = c.heads_per_cta;
  const int stage = st * 2 * hp * ts * d * kv_bytes;
  const int conv = c.kv_fp8 ? 2 * hp * ts * d * 2 : 0;
  const int q = hp * 8 * c.n_tiles * d * 2;
  const int lookups = (st + 1) * ts * (c.addr == 1 ? 16 : 8);  // sizeof(DecodeRow<addr>)
  return stage + conv + q + lookups;
}

DecodeConfig select_decode(DType q_dtype, bool kv_fp8, int64_t head_dim, int64_t group,
                           const SmemBudget& budget, int* ctas_per_sm) {
  if (q_dtype != DType::kBF16 && q_dtype != DType::kF16) {
    fail(KJIT_ERROR_UNSUPPORTED, "decode attention supports bf16 and fp16 q, not {}",
         dtype_name(q_dtype));
  }
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) {
    fail(KJIT_ERROR_UNSUPPORTED, "decode attention supports head_dim 64, 128 and 256, not {}",
         head_dim);
  }
  if (group < 1 || group > kDecodeMaxGroup) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "decode attention supports 1..{} query heads per kv head (two 8-head mma tiles), not {}",
         kDecodeMaxGroup, group);
  }
  DecodeConfig c;
  c.q_dtype = q_dtype;
  c.kv_fp8 = kv_fp8 ? 1 : 0;
  c.head_dim = static_cast<int>(head_dim);
  c.n_tiles = group <= 8 ? 1 : 2;
  geometry(c.head_dim, c.warps, c.stage_tokens);
  // Sized for 64-bit offsets, the larger lookups a run may fall back to (caches past 4 GB).
  c.addr = 1;
  // The deepest pipeline (2..4 stages) that fits two CTAs per SM, so one CTA's start and end
  // overlap the other's streaming; a device too small for that gets one deeper CTA per SM.
  auto deepest = [&](int room) {
    for (int s = 4; s >= 2; --s) {
      c.stages = s;
      if (decode_smem_bytes(c) <= room) return s;
    }
    return 0;
  };
  const int two = std::min(budget.per_block, budget.per_sm / 2 - budget.reserved);
  int per_sm = 2;
  int stages = deepest(two);
  if (stages == 0) {
    per_sm = 1;
    stages = deepest(std::min(budget.per_block, budget.per_sm - budget.reserved));
  }
  if (stages == 0) {
    c.stages = 2;
    fail(KJIT_ERROR_UNSUPPORTED,
         "decode attention head_dim {} needs {} bytes of shared memory per CTA; the device "
         "allows {}",
         head_dim, decode_smem_bytes(c), budget.per_block);
  }
  c.stages = stages;
  c.addr = 2;
  if (ctas_per_sm != nullptr) *ctas_per_sm = per_sm;
  return c;
}

std::string decode_uri(const DecodeConfig& c) {
  return decode_spec(c).uri;
}

jit::Spec decode_spec(const DecodeConfig& c) {
  const char* q_type = device_type_name(c.q_dtype);
  // Clusters and distributed shared memory are sm_90's.
  jit::SpecBuilder b("decode_attention", {"common", "attention"}, "attention/decode.cuh",
                     {c.cluster_merge != 0 ? "sm_90+" : "sm_80+"});
  b.type("q_dtype", dtype_name(c.q_dtype), q_type);
  // The mma operand type: fp16 for an fp8 cache (its values enter scaled by 2^-8), else q's.
  b.type("mma_dtype", c.kv_fp8 ? "fp16" : dtype_name(c.q_dtype), c.kv_fp8 ? "__half" : q_type);
  b.flag("kv_fp8", c.kv_fp8 != 0);
  b.value("head_dim", c.head_dim).value("n_tiles", c.n_tiles).value("warps", c.warps);
  b.value("stage_tokens", c.stage_tokens).value("stages", c.stages).value("cp_bytes", c.cp_bytes);
  // Left out of the URI at their defaults: one head per CTA, 32-bit offsets, one tile at a time.
  b.value("heads_per_cta", c.heads_per_cta, 1).value("addr", c.addr, 2);
  b.value("joint_tiles", c.joint_tiles, 1).flag("cluster_merge", c.cluster_merge != 0, true);
  b.entry("kjit::attention::decode_kernel");
  b.entry("kjit::attention::decode_merge_kernel", {"q_dtype", "head_dim"});
  return b.build();
}

// ---- Planning
// -------------------------------------------------------------------------------------

DecodeSplit choose_decode_split(const std::vector<int64_t>& eff, int kv_heads, int slots,
                                int row_bytes, int forced_splits) {
  DecodeSplit out;
  int64_t max_eff = 0, total = 0;
  for (int64_t e : eff) {
    max_eff = std::max(max_eff, e);
    total += e;
  }
  if (max_eff <= 1 || eff.empty()) return out;
  auto finish = [&](int64_t chunk) {
    const int64_t splits = (max_eff + chunk - 1) / chunk;
    if (splits > 1) {
      out.chunk = static_cast<int>(chunk);
      out.max_splits = static_cast<int>(splits);
    }
    return out;
  };
  if (forced_splits > 0) {
    const int64_t n = std::min<int64_t>({forced_splits, max_eff, kDecodeMaxSplits});
    return n <= 1 ? out : finish((max_eff + n - 1) / n);
  }
  slots = std::max(slots, 1);
  const int64_t unsplit_ctas = static_cast<int64_t>(eff.size()) * kv_heads;
  // Enough CTAs of similar length to fill every slot: splitting only adds merge work.
  if (unsplit_ctas >= slots && max_eff * static_cast<int64_t>(eff.size()) <= 2 * total) {
    return out;
  }
  // Per-CTA fixed cost (launch, page-table and q loads, the warps' merge) and the merge kernel,
  // in bytes of KV streamed by one CTA slot in the same time (~2 and ~3 us at ~16 GB/s).
  constexpr double kCtaCost = 32768, kMergeCost = 49152;
  std::vector<int64_t> candidates = {1,  2,  3,  4,  5,  6,  7,  8,  10,  12,  14,  16,  20,  24,
                                     28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256};
  const int64_t fill = slots / std::max<int64_t>(unsplit_ctas, 1);
  for (int64_t n : {fill - 1, fill, fill + 1}) candidates.push_back(n);
  double best_cost = 0;
  int64_t best_chunk = 0, best_n = 0;
  for (int64_t n : candidates) {
    if (n < 1 || n > kDecodeMaxSplits || (n > 1 && (max_eff + n - 1) / n < 16)) continue;
    int64_t chunk = (max_eff + n - 1) / n;
    if (n > 1) chunk = (chunk + 15) / 16 * 16;  // whole 16-token tiles
    int64_t ctas = 0;
    for (int64_t e : eff) ctas += kv_heads * std::max<int64_t>(1, (e + chunk - 1) / chunk);
    const int64_t waves = (ctas + slots - 1) / slots;
    const bool split = (max_eff + chunk - 1) / chunk > 1;
    const double cost =
        static_cast<double>(waves) * (static_cast<double>(chunk) * row_bytes + kCtaCost) +
        (split ? kMergeCost : 0.0);
    if (best_n == 0 || cost < best_cost || (cost == best_cost && n < best_n)) {
      best_cost = cost;
      best_chunk = chunk;
      best_n = n;
    }
  }
  return best_n <= 1 ? out : finish(best_chunk);
}

namespace {

bool one_of_1248(int x) {
  return x == 1 || x == 2 || x == 4 || x == 8;
}

// Applies the tuning overrides to the selected variant (pl.cfg, pl.ctas_per_sm), checking that
// the kernel's static requirements hold and that the CTA fits the device.
void apply_tuning(DecodePlanData& pl, const DecodeTuning& t, const SmemBudget& budget) {
  DecodeConfig c = pl.cfg;
  const DecodeConfig planned = c;
  if (t.warps != 0) {
    if (!one_of_1248(t.warps)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "tuning warps must be 1, 2, 4 or 8, got {}", t.warps);
    }
    c.warps = t.warps;
  }
  if (t.heads_per_cta != 0) {
    if (!one_of_1248(t.heads_per_cta)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "tuning heads_per_cta must be 1, 2, 4 or 8, got {}",
           t.heads_per_cta);
    }
    c.heads_per_cta = t.heads_per_cta;
  }
  if (t.addr >= 0) {
    if (t.addr != 1 && t.addr != 2) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "tuning addr must be 1 or 2, got {}", t.addr);
    }
    c.addr = t.addr;
  }
  if (t.joint_tiles != 0) {
    if (t.joint_tiles != 1 && t.joint_tiles != 2) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "tuning joint_tiles must be 1 or 2, got {}", t.joint_tiles);
    }
    c.joint_tiles = t.joint_tiles;
  }
  if (pl.num_kv_heads % c.heads_per_cta != 0 || c.warps % c.heads_per_cta != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "tuning heads_per_cta {} must divide num_kv_heads ({}) and warps ({})", c.heads_per_cta,
         pl.num_kv_heads, c.warps);
  }
  const int warps_per_head = c.warps / c.heads_per_cta;
  if (t.stage_tokens != 0) {
    c.stage_tokens = t.stage_tokens;
  } else {
    // The planned stage bytes (all heads of the CTA together), in whole tiles of every warp.
    const int tile = 16 * warps_per_head;
    const int want = planned.stage_tokens * planned.heads_per_cta / c.heads_per_cta;
    c.stage_tokens = std::max(tile, want / tile * tile);
  }
  if (c.stage_tokens < 16 || c.stage_tokens % (16 * warps_per_head) != 0 ||
      c.stage_tokens > 32 * c.warps) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "tuning stage_tokens {} must be a multiple of 16 x warps / heads_per_cta ({}) and at "
         "most 32 x warps ({})",
         c.stage_tokens, 16 * warps_per_head, 32 * c.warps);
  }
  if ((c.stage_tokens / (16 * warps_per_head)) % c.joint_tiles != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "tuning joint_tiles {}: each warp's {} tiles of a stage must group evenly", c.joint_tiles,
         c.stage_tokens / (16 * warps_per_head));
  }
  const int kv_bytes = c.kv_fp8 ? 1 : 2;
  // 16-byte copies are the fewest per stage: if they split evenly, so do 8- and 4-byte ones.
  const int cp_per_stage = c.heads_per_cta * c.stage_tokens * (c.head_dim * kv_bytes / 16);
  if (cp_per_stage % (32 * c.warps) != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "tuning: a stage's copies do not split over {} threads",
         32 * c.warps);
  }
  if (t.cluster_merge >= 0) c.cluster_merge = t.cluster_merge != 0 ? 1 : 0;
  // The warps' merge scratch lives in the stage buffers, and after it the cluster merge's partial
  // (decode.cuh's DecodeSmem::kCmEnd).
  auto scratch_fits = [&] {
    const int stage_bytes = c.stages * 2 * c.heads_per_cta * c.stage_tokens * c.head_dim * kv_bytes;
    const int rows = 8 * c.n_tiles;
    const int warp_merge = c.warps * rows * (c.head_dim + 4) * 4 + 2 * c.warps * rows * 4;
    const int cm_end = (warp_merge + 15) / 16 * 16 + c.heads_per_cta * rows * (c.head_dim + 1) * 4;
    return (c.cluster_merge != 0 ? cm_end : warp_merge) <= stage_bytes;
  };
  const int want_per_sm = t.ctas_per_sm > 0 ? t.ctas_per_sm : 2;
  // Sized for the 64-bit lookups a run falls back to from 32-bit ones (caches past 4 GB).
  const int addr = c.addr;
  if (c.addr == 2) c.addr = 1;
  if (t.stages != 0) {
    if (t.stages < 2 || t.stages > 8) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "tuning stages must be 2..8, got {}", t.stages);
    }
    c.stages = t.stages;
  } else {
    // The deepest of 2..4 stages that fits want_per_sm CTAs per SM, else one CTA per SM (when
    // the residency was not forced), else 2 stages (refused below if even that does not fit).
    auto deepest = [&](int per_sm) {
      const int room = std::min(budget.per_block, budget.per_sm / per_sm - budget.reserved);
      for (int st = 4; st >= 2; --st) {
        c.stages = st;
        if (decode_smem_bytes(c) <= room && scratch_fits()) return true;
      }
      return false;
    };
    if (!deepest(want_per_sm) && !(t.ctas_per_sm <= 0 && deepest(1))) c.stages = 2;
  }
  if (!scratch_fits()) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "tuning: {} stages of {} tokens are too small for the merge scratch{}", c.stages,
         c.stage_tokens, c.cluster_merge != 0 ? " and the cluster merge's partial" : "");
  }
  const int smem = decode_smem_bytes(c);
  c.addr = addr;
  if (smem > budget.per_block) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "tuning: the variant needs {} bytes of shared memory per CTA; the device allows {}", smem,
         budget.per_block);
  }
  int per_sm = t.ctas_per_sm;
  if (per_sm <= 0) {
    per_sm = std::max(1, std::min(budget.per_sm / (smem + budget.reserved), 2048 / (32 * c.warps)));
  }
  if (t.fused_merge >= 0) pl.fused_merge = t.fused_merge != 0 ? 1 : 0;
  if (t.pdl >= 0) pl.pdl = t.pdl != 0 ? 1 : 0;
  pl.cfg = c;
  pl.ctas_per_sm = per_sm;
}

}  // namespace

DecodePlanData plan_batch_decode(const int32_t* kv_indptr_host, int batch, int num_qo_heads,
                                 int num_kv_heads, int head_dim, int page_size, int layout,
                                 DLDataType q_dtype, DLDataType kv_dtype, float sm_scale,
                                 float logits_soft_cap, int window_left, int num_splits,
                                 int num_sms, int device_id, const DecodeTuning* tuning) {
  if (batch < 0) fail(KJIT_ERROR_INVALID_ARGUMENT, "batch must be >= 0, got {}", batch);
  if (batch > 0 && kv_indptr_host == nullptr) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "kv_indptr_host is NULL");
  }
  if (num_qo_heads < 1 || num_kv_heads < 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "num_qo_heads and num_kv_heads must be >= 1, got {} and {}",
         num_qo_heads, num_kv_heads);
  }
  if (num_qo_heads % num_kv_heads != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "num_qo_heads ({}) must be a multiple of num_kv_heads ({})",
         num_qo_heads, num_kv_heads);
  }
  if (head_dim < 1) fail(KJIT_ERROR_INVALID_ARGUMENT, "head_dim must be >= 1, got {}", head_dim);
  if (page_size < 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "page_size must be >= 1, got {}", page_size);
  }
  if (layout != KJIT_KV_LAYOUT_NHD && layout != KJIT_KV_LAYOUT_HND) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "layout must be KJIT_KV_LAYOUT_NHD (0) or _HND (1), got {}",
         layout);
  }
  const auto qd = dtype_of(q_dtype);
  if (!qd || !is_float(*qd)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "q_dtype {} is not a float dtype", dl_name(q_dtype));
  }
  const bool fp8 = is_e4m3(kv_dtype);
  if (!fp8) {
    const auto kd = dtype_of(kv_dtype);
    if (!kd || !is_float(*kd)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "kv_dtype {} is not a float or fp8 e4m3 dtype",
           dl_name(kv_dtype));
    }
    if (*kd != *qd) {
      fail(KJIT_ERROR_UNSUPPORTED,
           "decode attention needs kv_dtype = q_dtype or fp8 e4m3, not {} with {} q",
           dtype_name(*kd), dtype_name(*qd));
    }
  }
  if (std::isnan(sm_scale) || std::isinf(sm_scale) || sm_scale < 0.0f) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "sm_scale must be finite and >= 0 (0: 1/sqrt(head_dim)), "
         "got {}",
         sm_scale);
  }
  if (!std::isfinite(logits_soft_cap) || logits_soft_cap < 0.0f) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "logits_soft_cap must be finite and >= 0 (0: off), got {}",
         logits_soft_cap);
  }
  if (window_left < -1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "window_left must be -1 (off) or >= 0, got {}", window_left);
  }
  if (num_splits < 0 || num_splits > kDecodeMaxSplits) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "num_splits must be 0 (auto) or 1..{}, got {}",
         kDecodeMaxSplits, num_splits);
  }
  if (num_sms < 0) fail(KJIT_ERROR_INVALID_ARGUMENT, "num_sms must be >= 0, got {}", num_sms);
  if (device_id < 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "device_id must be >= 0, got {}", device_id);
  }
  std::vector<int64_t> eff(static_cast<size_t>(batch));
  if (batch > 0 && kv_indptr_host[0] < 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "kv_indptr_host[0] must be >= 0, got {}", kv_indptr_host[0]);
  }
  for (int b = 0; b < batch; ++b) {
    const int64_t pages = static_cast<int64_t>(kv_indptr_host[b + 1]) - kv_indptr_host[b];
    if (pages < 0) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "kv_indptr_host decreases at {}: {} then {}", b + 1,
           kv_indptr_host[b], kv_indptr_host[b + 1]);
    }
    const int64_t len = pages * page_size;  // an upper bound: the last page may be partial
    eff[static_cast<size_t>(b)] = window_left >= 0 ? std::min<int64_t>(len, window_left + 1) : len;
  }
  const int64_t group = num_qo_heads / num_kv_heads;

  SmemBudget budget;
  int sms = num_sms;
  std::string why;
  const bool have_driver = cuda::driver_available(&why);
  if (have_driver) {
    const cuda::DeviceInfo& info = cuda::device_info(device_id);
    if (sms == 0) sms = info.sm_count;
    const cuda::Driver& d = cuda::driver();
    CUdevice dev = 0;
    KJIT_CU_CHECK(d.cuDeviceGet(&dev, device_id));
    int per_sm = 0, reserved = 0;
    KJIT_CU_CHECK(d.cuDeviceGetAttribute(
        &per_sm, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev));
    KJIT_CU_CHECK(d.cuDeviceGetAttribute(
        &reserved, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, dev));
    budget.per_sm = per_sm;
    budget.per_block = info.max_smem_optin;
    budget.reserved = reserved;
  } else if (sms == 0) {
    fail(KJIT_ERROR_NO_DEVICE,
         "cannot query cuda:{} for its SM count (set num_sms to plan "
         "without a device): {}",
         device_id, why);
  }

  DecodePlanData pl;
  pl.cfg = select_decode(*qd, fp8, head_dim, group, budget, &pl.ctas_per_sm);
  pl.batch = batch;
  pl.num_qo_heads = num_qo_heads;
  pl.num_kv_heads = num_kv_heads;
  pl.group = static_cast<int>(group);
  pl.head_dim = head_dim;
  pl.page_size = page_size;
  pl.layout = layout;
  pl.device = device_id;
  pl.kv_dtype = kv_dtype;
  pl.sm_scale = sm_scale > 0.0f ? sm_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  pl.soft_cap = logits_soft_cap;
  pl.window_left = window_left;
  pl.num_sms = sms;
  if (tuning != nullptr) apply_tuning(pl, *tuning, budget);
  const int hp = pl.cfg.heads_per_cta;
  // A CTA streams the rows of all its heads: its "row" is hp heads wide.
  const int row_bytes = 2 * head_dim * (fp8 ? 1 : 2) * hp;
  pl.split =
      choose_decode_split(eff, num_kv_heads / hp, sms * pl.ctas_per_sm, row_bytes, num_splits);
  if (batch > 0) pl.kv_pages = static_cast<int64_t>(kv_indptr_host[batch]) - kv_indptr_host[0];
  if (static_cast<int64_t>(batch) * num_kv_heads * pl.split.max_splits > INT_MAX ||
      static_cast<int64_t>(batch) * num_qo_heads > INT_MAX) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "decode attention supports up to {} (request, kv head, split) CTAs and (request, qo "
         "head) rows, got {} x {} x {} and {} x {}",
         INT_MAX, batch, num_kv_heads, pl.split.max_splits, batch, num_qo_heads);
  }
  if (pl.cfg.cluster_merge != 0) {
    if (pl.split.max_splits > kDecodeClusterMax) {
      fail(KJIT_ERROR_UNSUPPORTED,
           "the cluster merge combines up to {} splits; this plan has {} (set num_splits)",
           kDecodeClusterMax, pl.split.max_splits);
    }
    if (have_driver && cuda::device_info(device_id).major < 9) {
      fail(KJIT_ERROR_UNSUPPORTED,
           "the cluster merge needs sm_90 or newer (thread-block clusters)");
    }
    if (pl.split.max_splits <= 1) pl.cfg.cluster_merge = 0;  // nothing to merge
    pl.fused_merge = 0;
  }
  if (pl.split.max_splits > 1) {
    const uint64_t parts = static_cast<uint64_t>(batch) * pl.split.max_splits * num_qo_heads;
    const uint64_t o_bytes = parts * head_dim * 4;
    pl.ws_lse_offset = (o_bytes + 255) / 256 * 256;
    pl.workspace_bytes = (pl.ws_lse_offset + parts * 4 + 255) / 256 * 256;
    if (pl.fused_merge != 0) {
      pl.counters_offset = pl.workspace_bytes;
      const uint64_t counters = static_cast<uint64_t>(batch) * (num_kv_heads / hp);
      pl.workspace_bytes = (pl.counters_offset + counters * 4 + 255) / 256 * 256;
    }
  } else {
    pl.fused_merge = 0;  // nothing to merge
  }
  return pl;
}

// ---- Running
// ---------------------------------------------------------------------------------------

void batch_decode_run(const DecodePlanData& pl, const DLTensor* q, const DLTensor* k_cache,
                      const DLTensor* v_cache, const DLTensor* kv_indices,
                      const DLTensor* kv_indptr, const DLTensor* kv_last_page_len,
                      DLTensor* workspace, DLTensor* out, DLTensor* lse, float k_scale,
                      float v_scale, void* stream) {
  const int dev = pl.device;
  const int64_t batch = pl.batch, qo = pl.num_qo_heads, kvh = pl.num_kv_heads, hd = pl.head_dim;

  const StridedView qv = as_strided_view(q, "q");
  if (qv.ndim != 3) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "q must be [batch, num_qo_heads, head_dim], got ndim {}",
         qv.ndim);
  }
  if (qv.dtype != pl.cfg.q_dtype) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "q is {} but the plan's q dtype is {}", dtype_name(qv.dtype),
         dtype_name(pl.cfg.q_dtype));
  }
  check_device(qv, "q", dev);
  if (qv.shape[0] != batch || qv.shape[1] != qo || qv.shape[2] != hd) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "q is [{}, {}, {}] but the plan is for [{}, {}, {}]",
         qv.shape[0], qv.shape[1], qv.shape[2], batch, qo, hd);
  }

  const bool nhd = pl.layout == KJIT_KV_LAYOUT_NHD;
  int ks = 1, vs = 1;
  const StridedView kc = cache_view(k_cache, "k_cache", pl, &ks);
  const StridedView vc = cache_view(v_cache, "v_cache", pl, &vs);
  const int slot_dim = nhd ? 1 : 2, head_dim_index = nhd ? 2 : 1;
  for (const auto& [c, cn] : {std::pair{&kc, "k_cache"}, std::pair{&vc, "v_cache"}}) {
    if (c->ndim != 4) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be {}, got ndim {}", cn,
           nhd ? "[num_pages, page_size, num_kv_heads, head_dim] (NHD)"
               : "[num_pages, num_kv_heads, page_size, head_dim] (HND)",
           c->ndim);
    }
    check_device(*c, cn, dev);
    const int64_t c_hd = c->shape[3] * (c == &kc ? ks : vs);
    if (c->shape[slot_dim] != pl.page_size || c->shape[head_dim_index] != kvh || c_hd != hd) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "{} has page_size {}, {} kv heads of {} ({} layout) but the plan has {}, {} of {}", cn,
           c->shape[slot_dim], c->shape[head_dim_index], c_hd, nhd ? "NHD" : "HND", pl.page_size,
           kvh, hd);
    }
  }
  if (vc.shape[0] != kc.shape[0]) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "v_cache has {} pages but k_cache has {}", vc.shape[0],
         kc.shape[0]);
  }

  const StridedView indices = int_vector(kv_indices, "kv_indices", dev);
  const StridedView indptr = int_vector(kv_indptr, "kv_indptr", dev);
  const StridedView last = int_vector(kv_last_page_len, "kv_last_page_len", dev);
  if (indptr.shape[0] != batch + 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "kv_indptr has {} elements but the plan has batch {} (+ 1)",
         indptr.shape[0], batch);
  }
  if (last.shape[0] != batch) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "kv_last_page_len has {} elements but the plan has batch {}",
         last.shape[0], batch);
  }
  if (indices.shape[0] > INT_MAX) {
    fail(KJIT_ERROR_UNSUPPORTED, "kv_indices has more than {} entries", INT_MAX);
  }

  const StridedView ov = as_strided_view(out, "out");
  if (ov.ndim != 3 || ov.shape[0] != batch || ov.shape[1] != qo || ov.shape[2] != hd) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out must be [{}, {}, {}] like q", batch, qo, hd);
  }
  if (ov.dtype != qv.dtype) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out is {} but q is {}", dtype_name(ov.dtype),
         dtype_name(qv.dtype));
  }
  check_device(ov, "out", dev);

  StridedView lv = no_view();
  if (lse != nullptr) {
    lv = as_strided_view(lse, "lse");
    if (lv.ndim != 2 || lv.shape[0] != batch || lv.shape[1] != qo) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "lse must be [{}, {}] (batch, num_qo_heads)", batch, qo);
    }
    if (lv.dtype != DType::kF32) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "lse must be fp32, got {}", dtype_name(lv.dtype));
    }
    check_device(lv, "lse", dev);
  }
  StridedView wv = no_view();
  if (pl.workspace_bytes > 0) wv = workspace_view(workspace, pl);
  check_scale(k_scale, "k_scale");
  check_scale(v_scale, "v_scale");

  // Outputs never overlap inputs or each other (views of nothing never overlap).
  const std::pair<const StridedView*, const char*> inputs[] = {{&qv, "q"},
                                                               {&kc, "k_cache"},
                                                               {&vc, "v_cache"},
                                                               {&indices, "kv_indices"},
                                                               {&indptr, "kv_indptr"},
                                                               {&last, "kv_last_page_len"}};
  const std::pair<const StridedView*, const char*> outputs[] = {
      {&ov, "out"}, {&lv, "lse"}, {&wv, "workspace"}};
  for (const auto& [o, on] : outputs) {
    if (self_overlaps(*o)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has strides under which elements overlap", on);
    }
    for (const auto& [in, in_name] : inputs) {
      if (views_overlap(*o, *in)) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} overlaps {}", on, in_name);
    }
  }
  if (views_overlap(ov, lv)) fail(KJIT_ERROR_INVALID_ARGUMENT, "lse overlaps out");
  if (views_overlap(ov, wv)) fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace overlaps out");
  if (views_overlap(lv, wv)) fail(KJIT_ERROR_INVALID_ARGUMENT, "workspace overlaps lse");

  const float kv_unscale = pl.cfg.kv_fp8 ? kFp8Unscale : 1.0f;
  float score_scale = pl.sm_scale * k_scale * kv_unscale;
  float cap_out = 0.0f;
  if (pl.soft_cap > 0.0f) {
    score_scale /= pl.soft_cap;
    cap_out = pl.soft_cap * kLog2e;
  } else {
    score_scale *= kLog2e;
  }
  const float v_eff = v_scale * kv_unscale;
  if (!std::isfinite(score_scale) || score_scale == 0.0f || !std::isfinite(v_eff)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "sm_scale {} x k_scale {} (or v_scale {}) overflows or underflows fp32", pl.sm_scale,
         k_scale, v_scale);
  }

  if (batch == 0) return;  // after validation

  // Rows are read in cp.async copies of 16 bytes when every row address allows, else 8 or 4.
  const int align = std::min(view_alignment(kc), view_alignment(vc));
  if (align < 4) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "k_cache / v_cache rows are only {}-byte aligned; decode attention needs 4", align);
  }
  DecodeConfig cfg = pl.cfg;
  cfg.cp_bytes = std::min(align, 16);
  if (cfg.addr == 2) {
    // 32-bit lookups hold (page, slot, head) byte offsets from the cache's start, and all ones
    // marks a masked row: every row must end below 2^32 - 1 (views have no negative strides).
    const uint64_t kv_bytes = pl.cfg.kv_fp8 ? 1 : 2;
    auto row_end = [&](const StridedView& v, int scale) {
      uint64_t elems = static_cast<uint64_t>(hd);
      for (int d = 0; d < 3; ++d) {
        elems += static_cast<uint64_t>(std::max<int64_t>(v.shape[d] - 1, 0)) *
                 static_cast<uint64_t>(v.strides[d]) * static_cast<uint64_t>(scale);
      }
      return elems * kv_bytes;
    };
    if (row_end(kc, ks) >= 0xffffffffull || row_end(vc, vs) >= 0xffffffffull) cfg.addr = 1;
  }
  if (trace::enabled()) {
    trace::batch_decode({pl.cfg.q_dtype, pl.cfg.kv_fp8 != 0, qo, kvh, hd, pl.page_size, nhd}, batch,
                        indices.shape[0], kc.shape[0], pl.kv_pages * pl.page_size / batch);
  }

  const jit::LoadedKernel& kernel = jit::JitCore::global().kernel_for(
      "decode_attention", cfg, dev, [&] { return decode_spec(cfg); });

  DecodeParams p{};
  p.q = qv.data;
  p.k_cache = kc.data;
  p.v_cache = vc.data;
  p.kv_indices = reinterpret_cast<const int*>(indices.data);
  p.kv_indptr = reinterpret_cast<const int*>(indptr.data);
  p.kv_last_page_len = reinterpret_cast<const int*>(last.data);
  p.out = ov.data;
  p.lse = lse != nullptr ? reinterpret_cast<float*>(lv.data) : nullptr;
  if (pl.split.max_splits > 1) {
    p.ws_o = reinterpret_cast<float*>(wv.data);
    p.ws_lse = reinterpret_cast<float*>(wv.data + pl.ws_lse_offset);
    if (pl.fused_merge != 0) p.counters = reinterpret_cast<int*>(wv.data + pl.counters_offset);
  }
  p.q_sb = qv.strides[0];
  p.q_sh = qv.strides[1];
  p.o_sb = ov.strides[0];
  p.o_sh = ov.strides[1];
  if (lse != nullptr) {
    p.lse_sb = lv.strides[0];
    p.lse_sh = lv.strides[1];
  }
  p.k_sp = kc.strides[0] * ks;
  p.k_ss = kc.strides[slot_dim] * ks;
  p.k_sh = kc.strides[head_dim_index] * ks;
  p.v_sp = vc.strides[0] * vs;
  p.v_ss = vc.strides[slot_dim] * vs;
  p.v_sh = vc.strides[head_dim_index] * vs;
  p.num_pages = kc.shape[0];
  p.batch = static_cast<int>(batch);
  p.num_qo_heads = static_cast<int>(qo);
  p.num_kv_heads = static_cast<int>(kvh);
  p.group = pl.group;
  p.page_size = pl.page_size;
  p.nnz_pages = static_cast<int>(indices.shape[0]);
  p.chunk = pl.split.chunk;
  p.max_splits = pl.split.max_splits;
  p.window_left = pl.window_left;
  p.score_scale = score_scale;
  p.cap_out = cap_out;
  p.v_scale = v_eff;

  cuda::LaunchConfig lc;
  lc.grid_x = static_cast<unsigned>(batch * (kvh / cfg.heads_per_cta) * pl.split.max_splits);
  lc.block_x = static_cast<unsigned>(32 * cfg.warps);
  lc.smem_bytes = static_cast<unsigned>(decode_smem_bytes(cfg));
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(dev);
  prefer_max_shared(kernel.functions.at(0));
  if (cfg.cluster_merge != 0) {
    // One cluster per (request, head set): its max_splits CTAs merge their partials themselves.
    cuda::launch_cluster(kernel.functions.at(0), lc, static_cast<unsigned>(pl.split.max_splits),
                         &p);
    return;
  }
  cuda::launch(kernel.functions.at(0), lc, &p);
  if (pl.split.max_splits > 1 && pl.fused_merge == 0) {
    cuda::LaunchConfig mc;
    mc.grid_x = static_cast<unsigned>(batch * qo);
    mc.block_x = 128;
    mc.stream = lc.stream;
    if (pl.pdl != 0 && cuda::device_info(dev).major >= 9) {
      // Its blocks start as the split CTAs start and wait in griddepcontrol.wait for their results.
      cuda::launch_dependent(kernel.functions.at(1), mc, &p);
    } else {
      cuda::launch(kernel.functions.at(1), mc, &p);
    }
  }
}

// ---- Registry
// --------------------------------------------------------------------------------------

OpDef decode_attention_op_def() {
  OpDef d;
  d.name = "decode_attention";
  d.summary =
      "paged batch decode attention (GQA on tensor cores, split-KV, NHD / HND, fp8 KV); the "
      "split merge kernel is in the same module";
  d.axes = {{"q_dtype", {"bf16", "fp16"}, true, "q and out dtype"},
            {"kv_dtype", {"bf16", "fp16", "e4m3"}, false, "KV cache dtype (default: q_dtype)"},
            {"head_dim", {"64", "128", "256"}, true, "head size"},
            {"group", {}, true, "query heads per kv head (1..16)"},
            {"smem_kb",
             {"228", "164", "100"},
             false,
             "shared memory per SM of the target: 228 H100/H200 (default), 164 A100, 100 "
             "sm_86/sm_89"},
            {"align", {"16", "8", "4"}, false, "byte alignment of the cache rows (default 16)"},
            {"heads_per_cta",
             {"1", "2", "4"},
             false,
             "kv heads per CTA (default 1; 2 / 4 read longer NHD rows, a tuning variant)"},
            {"addr",
             {"32", "64"},
             false,
             "row addresses the lookups hand the loads: 32- (default) or 64-bit byte offsets "
             "(caches over 4 GB)"},
            {"merge",
             {"kernel", "cluster"},
             false,
             "how split partials combine: a merge kernel (default) or, on sm_90, in a "
             "thread-block cluster through distributed shared memory"}};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    const DType q = args.at("q_dtype") == "fp16" ? DType::kF16 : DType::kBF16;
    const std::string kv = args.count("kv_dtype") ? args.at("kv_dtype") : args.at("q_dtype");
    if (kv != "e4m3" && kv != args.at("q_dtype")) {
      fail(KJIT_ERROR_UNSUPPORTED,
           "decode attention needs kv_dtype = q_dtype or e4m3, not {} "
           "with {} q",
           kv, args.at("q_dtype"));
    }
    const int64_t group = positive_int_arg(args, "group", 1 << 20);
    const SmemBudget budget = budget_for_class(int_arg_or(args, "smem_kb", 228));
    DecodePlanData pl;
    pl.cfg = select_decode(q, kv == "e4m3", std::stoi(args.at("head_dim")), group, budget);
    const int hp = int_arg_or(args, "heads_per_cta", 1);
    if (hp != 1) {
      DecodeTuning t;
      t.heads_per_cta = hp;
      pl.num_kv_heads = hp;
      apply_tuning(pl, t, budget);
    }
    pl.cfg.cp_bytes = int_arg_or(args, "align", 16);
    if (args.count("addr")) {
      const std::string& a = args.at("addr");
      pl.cfg.addr = a == "64" ? 1 : 2;
    }
    if (args.count("merge")) pl.cfg.cluster_merge = args.at("merge") == "cluster" ? 1 : 0;
    return decode_spec(pl.cfg);
  };
  d.catalog = [] {
    std::vector<SetArgs> out;
    // Llama / Mistral / Qwen (128), Gemma (256), small models and DeepSeek-style rope heads
    // (64); group 4 stands for 1..8 (one n-tile), 16 for 9..16 (Llama 3.1 405B, Falcon 40B).
    for (const char* hd : {"64", "128", "256"}) {
      for (const char* g : {"4", "16"}) {
        out.push_back({{"q_dtype", "bf16"}, {"head_dim", hd}, {"group", g}});
      }
      out.push_back({{"q_dtype", "fp16"}, {"head_dim", hd}, {"group", "4"}});
      out.push_back({{"q_dtype", "bf16"}, {"kv_dtype", "e4m3"}, {"head_dim", hd}, {"group", "4"}});
    }
    out.push_back({{"q_dtype", "fp16"}, {"head_dim", "128"}, {"group", "16"}});
    out.push_back({{"q_dtype", "fp16"}, {"kv_dtype", "e4m3"}, {"head_dim", "128"}, {"group", "4"}});
    out.push_back(
        {{"q_dtype", "bf16"}, {"kv_dtype", "e4m3"}, {"head_dim", "128"}, {"group", "16"}});
    // The A100 budget picks a shallower pipeline (sm_86 / sm_89 resolve to the same one).
    out.push_back({{"q_dtype", "bf16"}, {"head_dim", "128"}, {"group", "4"}, {"smem_kb", "164"}});
    out.push_back({{"q_dtype", "bf16"}, {"head_dim", "128"}, {"group", "4"}, {"align", "8"}});
    // One multi-head tuning variant, so that code path keeps compiling everywhere; round 7 found
    // every heads_per_cta > 1 slower than one head per CTA (docs/perf-notes.md), so it is only a
    // `bench --set` option, never planned by default.
    out.push_back(
        {{"q_dtype", "bf16"}, {"head_dim", "128"}, {"group", "4"}, {"heads_per_cta", "2"}});
    // Caches past 4 GB take 64-bit offsets.
    out.push_back({{"q_dtype", "bf16"}, {"head_dim", "128"}, {"group", "4"}, {"addr", "64"}});
    // The cluster merge (sm_90 only; see DecodeConfig::cluster_merge).
    for (const char* g : {"4", "16"}) {
      out.push_back({{"q_dtype", "bf16"}, {"head_dim", "128"}, {"group", g}, {"merge", "cluster"}});
    }
    return out;
  };
  return d;
}

}  // namespace kjit::ops
