// Mixture-of-experts routing: scores, (grouped) top-k selection and the experts' weights, one
// warp per token (kernels/moe/moe_params.h).
//
//   score[e] = softmax(logits)[e] or sigmoid(logits[e]), in fp32
//   choice[e] = score[e] + bias[e] (bias only steers the selection: DeepSeek-V3's correction)
//   n_group > 1: the experts form n_group equal groups of consecutive ids; a group's score is
//     the sum of its two largest choice values, the topk_group best groups stay eligible, and
//     experts of the others are never selected
//   topk_ids = the top_k eligible experts by choice value, largest first
//   topk_weights = score of each (unbiased), divided by their sum when renormalize, times
//     routed_scaling_factor
// Order (of experts and of groups) is torch.topk's: larger first, equal values by lower index,
// NaN above everything.
//
// Launch contract: ceil(tokens / (kMoeRouteThreads / 32)) blocks of kMoeRouteThreads threads, no
// dynamic shared memory; experts <= kMoeMaxExperts, top_k <= kMoeMaxTopK, n_group <=
// kMoeMaxGroups, experts / n_group >= 2 and top_k <= topk_group * (experts / n_group) (checked by
// the host).
#pragma once

#include "common/prelude.cuh"
#include "moe/moe_params.h"

namespace kjit {
namespace moe {

constexpr int kRouteWarps = kMoeRouteThreads / 32;

// The order of torch.topk: NaN first, then larger values, equal values by lower index. An index
// below 0 holds nothing yet and ranks last.
KJIT_DEVICE KJIT_FORCEINLINE bool ranks_above(float v, int i, float bv, int bi) {
  if (bi < 0) return true;
  const bool vn = isnan(v), bn = isnan(bv);
  if (vn != bn) return vn;
  if (vn || v == bv) return i < bi;
  return v > bv;
}

// The warp's best (value, index): every lane gets it.
KJIT_DEVICE KJIT_FORCEINLINE void warp_best(float& v, int& i) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, offset);
    const int oi = __shfl_xor_sync(0xffffffffu, i, offset);
    if (oi >= 0 && ranks_above(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

KJIT_DEVICE KJIT_FORCEINLINE float warp_max_f(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

KJIT_DEVICE KJIT_FORCEINLINE float warp_sum_f(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// score[] of one token's logits (every lane of the warp calls it).
template <typename IN>
KJIT_DEVICE KJIT_FORCEINLINE void compute_scores(const MoeRouteParams& p, i64 t, float* score) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const IN* row = static_cast<const IN*>(p.logits) + t * p.logits_stride;
  if (p.scoring == kMoeScoreSoftmax) {
    float mx = -__int_as_float(0x7f800000);  // -inf (NVRTC has no INFINITY)
    for (int e = lane; e < p.experts; e += 32) {
      score[e] = to_float(row[e]);
      mx = fmaxf(mx, score[e]);
    }
    mx = warp_max_f(mx);
    float sum = 0.0f;
    for (int e = lane; e < p.experts; e += 32) {
      score[e] = expf(score[e] - mx);
      sum += score[e];
    }
    sum = warp_sum_f(sum);
    for (int e = lane; e < p.experts; e += 32) score[e] = score[e] / sum;
  } else {
    for (int e = lane; e < p.experts; e += 32) score[e] = 1.0f / (1.0f + expf(-to_float(row[e])));
  }
  __syncwarp();
}

// The eligible groups as a bit mask (bit g: group g), every lane gets it. Lane g scores group g.
KJIT_DEVICE KJIT_FORCEINLINE u32 select_groups(const MoeRouteParams& p, const float* choice) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (p.n_group <= 1) return 1u;
  const int size = p.experts / p.n_group;
  float v = 0.0f;
  int idx = -1;
  if (lane < p.n_group) {
    float b1 = 0.0f, b2 = 0.0f;
    int i1 = -1, i2 = -1;
    for (int e = lane * size; e < (lane + 1) * size; ++e) {
      if (ranks_above(choice[e], e, b1, i1)) {
        b2 = b1;
        i2 = i1;
        b1 = choice[e];
        i1 = e;
      } else if (ranks_above(choice[e], e, b2, i2)) {
        b2 = choice[e];
        i2 = e;
      }
    }
    v = b1 + b2;
    idx = lane;
  }
  u32 mask = 0;
  for (int g = 0; g < p.topk_group; ++g) {
    const bool taken = idx >= 0 && ((mask >> idx) & 1u);
    float bv = taken ? 0.0f : v;
    int bi = taken ? -1 : idx;
    warp_best(bv, bi);
    mask |= 1u << bi;
  }
  return mask;
}

template <typename IN>
__global__ void __launch_bounds__(kMoeRouteThreads)
    moe_route_kernel(const __grid_constant__ MoeRouteParams p) {
  __shared__ float score_smem[kRouteWarps][kMoeMaxExperts];
  __shared__ float choice_smem[kRouteWarps][kMoeMaxExperts];
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const i64 t = i64(blockIdx.x) * kRouteWarps + warp;
  if (t >= p.tokens) return;  // whole warps leave: the shuffles below stay full
  float* score = score_smem[warp];
  float* choice = choice_smem[warp];
  compute_scores<IN>(p, t, score);
  for (int e = lane; e < p.experts; e += 32) {
    choice[e] = p.bias != nullptr ? score[e] + p.bias[e] : score[e];
  }
  __syncwarp();
  const u32 groups = select_groups(p, choice);
  const int group_size = p.n_group > 1 ? p.experts / p.n_group : p.experts;

  int chosen[kMoeMaxTopK];
  float weight[kMoeMaxTopK];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kMoeMaxTopK; ++i) {
    chosen[i] = -1;
    weight[i] = 0.0f;
    if (i >= p.top_k) continue;
    float bv = 0.0f;
    int bi = -1;
    for (int e = lane; e < p.experts; e += 32) {
      if (((groups >> (e / group_size)) & 1u) == 0) continue;
      bool taken = false;
#pragma unroll
      for (int j = 0; j < i; ++j) taken |= chosen[j] == e;
      if (!taken && ranks_above(choice[e], e, bv, bi)) {
        bv = choice[e];
        bi = e;
      }
    }
    warp_best(bv, bi);
    chosen[i] = bi;
    weight[i] = score[bi];
    sum += weight[i];
  }
#pragma unroll
  for (int i = 0; i < kMoeMaxTopK; ++i) {
    if (i < p.top_k && lane == i) {
      p.topk_ids[t * p.top_k + i] = chosen[i];
      p.topk_weights[t * p.top_k + i] = p.renormalize ? weight[i] / sum * p.routed_scaling_factor
                                                      : weight[i] * p.routed_scaling_factor;
    }
  }
}

}  // namespace moe
}  // namespace kjit
