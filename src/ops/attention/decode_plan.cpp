// Decode attention's planning: the variant for the dtypes and sizes (select_decode), a tactic's
// changes to it, the split-KV partition and the workspace (DecodePlanner, plan_batch_decode). Pure
// host code apart from the device queries.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "ops/attention/attention_common.hpp"
#include "ops/attention/decode_attention.hpp"
#include "ops/attention/decode_internal.hpp"
#include "ops/attention/decode_tactics.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace decode_detail {

bool is_e4m3(DLDataType t) {
  return t.lanes == 1 && t.bits == 8 && (t.code == kDLFloat8E4m3fn || t.code == kDLUInt);
}

std::string dl_name(DLDataType t) {
  if (is_e4m3(t)) return "fp8 e4m3";
  if (auto d = dtype_of(t)) return dtype_name(*d);
  return fmt::format("(code {}, bits {}, lanes {})", t.code, t.bits, t.lanes);
}

}  // namespace decode_detail

using attention_detail::check_score_options;
using attention_detail::device_budget;
using decode_detail::dl_name;
using decode_detail::is_e4m3;

namespace {

// Warps and tokens per stage: 16 tokens per warp tile, ~32 KB of K + V per stage (a 256-wide
// head gets two warps so that a stage stays at 32 KB).
void geometry(int head_dim, int& warps, int& stage_tokens) {
  switch (head_dim) {
    case 64: warps = 4, stage_tokens = 128; break;
    case 128: warps = 4, stage_tokens = 64; break;
    default: warps = 2, stage_tokens = 32; break;
  }
}

bool one_of_1248(int x) {
  return x == 1 || x == 2 || x == 4 || x == 8;
}

// A tactic's shape of the CTA (warps, heads, lookups, joint tiles, stage tokens, merge), checked
// against the kernel's static requirements.
DecodeConfig tuned_shape(const DecodePlanData& pl, const DecodeTactic& t) {
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
  if (t.merge != DecodeMerge::kPlanned) c.cluster_merge = t.merge == DecodeMerge::kCluster ? 1 : 0;
  return c;
}

// Whether the warps' merge scratch fits in the stage buffers, and after it the cluster merge's
// partial (decode.cuh's DecodeSmem::kScratch and kCmEnd).
bool merge_scratch_fits(const DecodeConfig& c) {
  const int kv_bytes = c.kv_fp8 ? 1 : 2;
  const int stage_bytes = c.stages * 2 * c.heads_per_cta * c.stage_tokens * c.head_dim * kv_bytes;
  const int rows = 8 * c.n_tiles;
  const int warp_merge = c.warps * rows * (c.head_dim + 4) * 4 + 2 * c.warps * rows * 4;
  const int cm_end = (warp_merge + 15) / 16 * 16 + c.heads_per_cta * rows * (c.head_dim + 1) * 4;
  return (c.cluster_merge != 0 ? cm_end : warp_merge) <= stage_bytes;
}

// Sets c.stages (the tactic's, else the deepest that fits) and returns the CTAs per SM the wave
// model assumes; throws when the CTA does not fit the device.
int tuned_stages(DecodeConfig& c, const DecodeTactic& t, const SmemBudget& budget) {
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
        if (decode_smem_bytes(c) <= room && merge_scratch_fits(c)) return true;
      }
      return false;
    };
    if (!deepest(want_per_sm) && !(t.ctas_per_sm <= 0 && deepest(1))) c.stages = 2;
  }
  if (!merge_scratch_fits(c)) {
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
  return per_sm;
}

// ---- plan_batch_decode's phases -----------------------------------------------------------------

void check_plan_shape(const int32_t* kv_indptr_host, int batch, int num_qo_heads, int num_kv_heads,
                      int head_dim, int page_size, int layout) {
  if (batch < 0) fail(KJIT_ERROR_INVALID_ARGUMENT, "batch must be >= 0, got {}", batch);
  if (batch > 0 && kv_indptr_host == nullptr) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "kv_indptr_host is NULL");
  }
  attention_detail::check_head_counts(num_qo_heads, num_kv_heads, head_dim);
  if (page_size < 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "page_size must be >= 1, got {}", page_size);
  }
  if (layout != KJIT_KV_LAYOUT_NHD && layout != KJIT_KV_LAYOUT_HND) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "layout must be KJIT_KV_LAYOUT_NHD (0) or _HND (1), got {}",
         layout);
  }
}

// q's dtype; the cache must hold q's dtype or fp8 e4m3.
DType check_plan_dtypes(DLDataType q_dtype, DLDataType kv_dtype) {
  const auto qd = dtype_of(q_dtype);
  if (!qd || !is_float(*qd)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "q_dtype {} is not a float dtype", dl_name(q_dtype));
  }
  if (!is_e4m3(kv_dtype)) {
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
  return *qd;
}

void check_plan_scalars(float sm_scale, float logits_soft_cap, int window_left, int num_splits,
                        int num_sms, int device_id) {
  check_score_options(sm_scale, logits_soft_cap, window_left);
  if (num_splits < 0 || num_splits > kDecodeMaxSplits) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "num_splits must be 0 (auto) or 1..{}, got {}",
         kDecodeMaxSplits, num_splits);
  }
  if (num_sms < 0) fail(KJIT_ERROR_INVALID_ARGUMENT, "num_sms must be >= 0, got {}", num_sms);
  if (device_id < 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "device_id must be >= 0, got {}", device_id);
  }
}

// The positions each request attends at most (its pages times page_size, within the window).
std::vector<int64_t> attended_lengths(const int32_t* kv_indptr_host, int batch, int page_size,
                                      int window_left) {
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
  return eff;
}

// How the splits combine (cluster, fused or merge kernel) and the workspace that takes.
void plan_merge(DecodePlanData& pl, bool have_driver) {
  const int hp = pl.cfg.heads_per_cta;
  if (pl.cfg.cluster_merge != 0) {
    if (pl.split.max_splits > kDecodeClusterMax) {
      fail(KJIT_ERROR_UNSUPPORTED,
           "the cluster merge combines up to {} splits; this plan has {} (set num_splits)",
           kDecodeClusterMax, pl.split.max_splits);
    }
    if (have_driver && cuda::device_info(pl.device).major < 9) {
      fail(KJIT_ERROR_UNSUPPORTED,
           "the cluster merge needs sm_90 or newer (thread-block clusters)");
    }
    if (pl.split.max_splits <= 1) pl.cfg.cluster_merge = 0;  // nothing to merge
    pl.fused_merge = 0;
  }
  if (pl.split.max_splits > 1) {
    const uint64_t parts = static_cast<uint64_t>(pl.batch) * pl.split.max_splits * pl.num_qo_heads;
    const uint64_t o_bytes = parts * pl.head_dim * 4;
    pl.ws_lse_offset = (o_bytes + 255) / 256 * 256;
    pl.workspace_bytes = (pl.ws_lse_offset + parts * 4 + 255) / 256 * 256;
    if (pl.fused_merge != 0) {
      pl.counters_offset = pl.workspace_bytes;
      const uint64_t counters = static_cast<uint64_t>(pl.batch) * (pl.num_kv_heads / hp);
      pl.workspace_bytes = (pl.counters_offset + counters * 4 + 255) / 256 * 256;
    }
  } else {
    pl.fused_merge = 0;  // nothing to merge
  }
}

}  // namespace

namespace decode_detail {

void apply_tactic(DecodePlanData& pl, const DecodeTactic& t, const SmemBudget& budget) {
  DecodeConfig c = tuned_shape(pl, t);
  const int per_sm = tuned_stages(c, t, budget);
  if (t.merge != DecodeMerge::kPlanned) pl.fused_merge = t.merge == DecodeMerge::kFused ? 1 : 0;
  if (t.pdl >= 0) pl.pdl = t.pdl != 0 ? 1 : 0;
  pl.cfg = c;
  pl.ctas_per_sm = per_sm;
}

}  // namespace decode_detail

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
  // Two 8-head mma n-tiles hold up to 16 query heads per kv head.
  attention_detail::check_attention_support("decode attention", q_dtype, head_dim, group,
                                            kDecodeMaxGroup);
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

DecodePlanner::DecodePlanner(const int32_t* kv_indptr_host, int batch, int num_qo_heads,
                             int num_kv_heads, int head_dim, int page_size, int layout,
                             DLDataType q_dtype, DLDataType kv_dtype, float sm_scale,
                             float logits_soft_cap, int window_left, int num_splits, int num_sms,
                             int device_id, const SmemBudget* budget)
    : indptr_(kv_indptr_host),
      batch_(batch),
      qo_heads_(num_qo_heads),
      kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      page_size_(page_size),
      layout_(layout),
      q_dtype_(q_dtype),
      kv_dtype_(kv_dtype),
      sm_scale_(sm_scale),
      soft_cap_(logits_soft_cap),
      window_left_(window_left),
      num_splits_(num_splits),
      device_(device_id) {
  check_plan_shape(kv_indptr_host, batch, num_qo_heads, num_kv_heads, head_dim, page_size, layout);
  qd_ = check_plan_dtypes(q_dtype, kv_dtype);
  fp8_ = is_e4m3(kv_dtype);
  check_plan_scalars(sm_scale, logits_soft_cap, window_left, num_splits, num_sms, device_id);
  eff_ = attended_lengths(kv_indptr_host, batch, page_size, window_left);
  for (int64_t e : eff_) max_eff_ = std::max(max_eff_, e);
  if (budget != nullptr) {
    if (num_sms <= 0) fail(KJIT_ERROR_INVALID_ARGUMENT, "a plan for a given budget needs num_sms");
    budget_ = *budget;
    sms_ = num_sms;
  } else {
    have_driver_ = device_budget(device_id, num_sms, &budget_, &sms_);
  }
  heuristic_ = finish(base(), num_splits_);
}

DecodePlanData DecodePlanner::base() const {
  DecodePlanData pl;
  pl.cfg = select_decode(qd_, fp8_, head_dim_, qo_heads_ / kv_heads_, budget_, &pl.ctas_per_sm);
  pl.batch = batch_;
  pl.num_qo_heads = qo_heads_;
  pl.num_kv_heads = kv_heads_;
  pl.group = qo_heads_ / kv_heads_;
  pl.head_dim = head_dim_;
  pl.page_size = page_size_;
  pl.layout = layout_;
  pl.device = device_;
  pl.kv_dtype = kv_dtype_;
  pl.sm_scale = sm_scale_ > 0.0f ? sm_scale_ : 1.0f / std::sqrt(static_cast<float>(head_dim_));
  pl.soft_cap = soft_cap_;
  pl.window_left = window_left_;
  pl.num_sms = sms_;
  return pl;
}

DecodePlanData DecodePlanner::finish(DecodePlanData pl, int forced_splits) const {
  const int hp = pl.cfg.heads_per_cta;
  // A CTA streams the rows of all its heads: its "row" is hp heads wide.
  const int row_bytes = 2 * head_dim_ * (fp8_ ? 1 : 2) * hp;
  pl.split =
      choose_decode_split(eff_, kv_heads_ / hp, sms_ * pl.ctas_per_sm, row_bytes, forced_splits);
  if (batch_ > 0) pl.kv_pages = static_cast<int64_t>(indptr_[batch_]) - indptr_[0];
  if (static_cast<int64_t>(batch_) * kv_heads_ * pl.split.max_splits > INT_MAX ||
      static_cast<int64_t>(batch_) * qo_heads_ > INT_MAX) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "decode attention supports up to {} (request, kv head, split) CTAs and (request, qo "
         "head) rows, got {} x {} x {} and {} x {}",
         INT_MAX, batch_, kv_heads_, pl.split.max_splits, batch_, qo_heads_);
  }
  plan_merge(pl, have_driver_);
  return pl;
}

DecodePlanData DecodePlanner::with(const DecodeTactic& t) const {
  DecodePlanData pl = base();
  // A cluster merge needs its partial's room after the warps' merge scratch: its stages are
  // sized again. A tactic of only a split and a merge kernel keeps the planned CTA.
  if (!t.keeps_cta() || t.merge == DecodeMerge::kCluster) {
    decode_detail::apply_tactic(pl, t, budget_);
  } else if (t.merge != DecodeMerge::kPlanned) {
    pl.fused_merge = t.merge == DecodeMerge::kFused ? 1 : 0;
  }
  return finish(pl, t.splits > 0 ? t.splits : num_splits_);
}

DecodePlanData plan_batch_decode(const int32_t* kv_indptr_host, int batch, int num_qo_heads,
                                 int num_kv_heads, int head_dim, int page_size, int layout,
                                 DLDataType q_dtype, DLDataType kv_dtype, float sm_scale,
                                 float logits_soft_cap, int window_left, int num_splits,
                                 int num_sms, int device_id, const DecodeTactic* forced,
                                 const DecodeTuneRequest* tune) {
  const DecodePlanner planner(kv_indptr_host, batch, num_qo_heads, num_kv_heads, head_dim,
                              page_size, layout, q_dtype, kv_dtype, sm_scale, logits_soft_cap,
                              window_left, num_splits, num_sms, device_id);
  DecodeTactic tactic;
  DecodePlanData pl;
  if (forced != nullptr) {
    tactic = *forced;
    pl = planner.with(tactic);
    pl.tactic_source = tune::source_name(tune::Choice::Source::kForced);
  } else {
    const DecodeTacticChoice c = choose_decode_tactic(planner, tune ? *tune : DecodeTuneRequest{});
    tactic = c.tactic;
    // The default keeps the wave model's own partition (a forced split count rounds differently).
    pl = tactic == planner.default_tactic() ? planner.heuristic() : planner.with(tactic);
    pl.tactic_source = tune::source_name(c.choice.source);
  }
  const std::string name = tactic.name();
  std::snprintf(pl.tactic, sizeof pl.tactic, "%s", name.c_str());
  return pl;
}

}  // namespace kjit::ops
