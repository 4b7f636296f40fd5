// fp64 CPU reference for the mixture-of-experts family: routing (scores, grouped top-k in
// torch.topk's order, weights), the stable permutation by expert, and finalize. Written from the
// definitions in kjit.h, not from the kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace kjit::ref {

struct MoeRouteOptions {
  bool sigmoid = false;
  bool renormalize = false;
  int n_group = 1, topk_group = 1;
  double routed_scaling_factor = 1.0;
};

// One token's routing. logits and bias (null: none) hold `experts` values. Out: ids and weights
// (top_k each), choice (the biased scores, experts values) and eligible (per expert: in a kept
// group).
struct MoeRouteToken {
  std::vector<int> ids;
  std::vector<double> weights, score, choice;
  std::vector<bool> eligible;
};

// torch.topk's order over (value, index): larger first, equal values by lower index.
inline bool moe_ranks_above(double v, int i, double bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// The indices of the k best of values[0..n) (only where allowed), best first.
inline std::vector<int> moe_top(const std::vector<double>& values, const std::vector<bool>& allowed,
                                int k) {
  std::vector<int> order;
  for (int i = 0; i < static_cast<int>(values.size()); ++i) {
    if (allowed[i]) order.push_back(i);
  }
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return moe_ranks_above(values[a], a, values[b], b); });
  order.resize(std::min<size_t>(order.size(), static_cast<size_t>(k)));
  return order;
}

inline MoeRouteToken moe_route_token(const double* logits, const double* bias, int experts,
                                     int top_k, const MoeRouteOptions& o) {
  MoeRouteToken r;
  r.score.resize(experts);
  if (o.sigmoid) {
    for (int e = 0; e < experts; ++e) r.score[e] = 1.0 / (1.0 + std::exp(-logits[e]));
  } else {
    const double mx = *std::max_element(logits, logits + experts);
    double sum = 0.0;
    for (int e = 0; e < experts; ++e) sum += std::exp(logits[e] - mx);
    for (int e = 0; e < experts; ++e) r.score[e] = std::exp(logits[e] - mx) / sum;
  }
  r.choice.resize(experts);
  for (int e = 0; e < experts; ++e) r.choice[e] = r.score[e] + (bias != nullptr ? bias[e] : 0.0);
  r.eligible.assign(experts, true);
  if (o.n_group > 1) {
    const int size = experts / o.n_group;
    std::vector<double> group_score(o.n_group);
    for (int g = 0; g < o.n_group; ++g) {
      std::vector<double> v(r.choice.begin() + g * size, r.choice.begin() + (g + 1) * size);
      std::sort(v.begin(), v.end(), std::greater<double>());
      group_score[g] = v[0] + v[1];
    }
    const std::vector<int> kept =
        moe_top(group_score, std::vector<bool>(o.n_group, true), o.topk_group);
    for (int e = 0; e < experts; ++e) {
      r.eligible[e] = std::find(kept.begin(), kept.end(), e / size) != kept.end();
    }
  }
  r.ids = moe_top(r.choice, r.eligible, top_k);
  double sum = 0.0;
  for (int id : r.ids) sum += r.score[id];
  for (int id : r.ids) {
    r.weights.push_back((o.renormalize ? r.score[id] / sum : r.score[id]) *
                        o.routed_scaling_factor);
  }
  return r;
}

// The stable sort of the pairs by expert: ids [pairs] (pair = t * top_k + j); ids outside
// [0, experts) go last. offsets [experts + 1], permuted_to_src [pairs], src_to_permuted [pairs]
// (-1 for the ids outside).
struct MoePermutation {
  std::vector<int> offsets, permuted_to_src, src_to_permuted;
};

inline MoePermutation moe_permute(const std::vector<int>& ids, int experts) {
  const int pairs = static_cast<int>(ids.size());
  auto bucket = [&](int p) { return ids[p] >= 0 && ids[p] < experts ? ids[p] : experts; };
  MoePermutation r;
  r.permuted_to_src.resize(pairs);
  std::iota(r.permuted_to_src.begin(), r.permuted_to_src.end(), 0);
  std::stable_sort(r.permuted_to_src.begin(), r.permuted_to_src.end(),
                   [&](int a, int b) { return bucket(a) < bucket(b); });
  r.offsets.assign(experts + 1, 0);
  for (int p = 0; p < pairs; ++p) {
    for (int e = bucket(p) + 1; e <= experts; ++e) ++r.offsets[e];
  }
  // offsets[e] = pairs in buckets below e (offsets[experts]: all valid pairs).
  r.src_to_permuted.assign(pairs, -1);
  for (int d = 0; d < pairs; ++d) {
    const int p = r.permuted_to_src[d];
    if (bucket(p) < experts) r.src_to_permuted[p] = d;
  }
  return r;
}

}  // namespace kjit::ref
