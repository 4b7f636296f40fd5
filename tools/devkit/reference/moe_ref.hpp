// fp64 CPU reference for the mixture-of-experts family: routing (scores, grouped top-k in
// torch.topk's order, weights), the stable permutation by expert, finalize, SwiGLU experts and
// the fp8 block-scaled grouped GEMM's outputs. Written from the
// definitions in kjit.h, not from the kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "reference/fp8_ref.hpp"
#include "reference/gemm_ref.hpp"

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

// The SwiGLU activation of one token through one expert, in fp64: with w13 [2 I, H] (gate rows,
// then up rows), row-major,
//   g_i = w13[i] . x, u_i = w13[I + i] . x, h_i = silu(g_i) * u_i.
// err[i] bounds how far a GPU's h_i may land: g and u each rounded to a format of unit roundoff
// u_gu (0: kept in fp32, as the fused epilogue does), h rounded to u_h, and the fp32
// accumulations (as ref::gemm_tolerance counts them; silu in fp32 likewise), carried through the
// formula with |silu'| <= 1.1 everywhere.
struct MoeValues {
  std::vector<double> v, err;
};

inline constexpr double kMoeFp32Acc = 0x1p-20;  // per sqrt(k) of the magnitude sum

inline MoeValues moe_swiglu_act(const double* x, const double* w13, int64_t hidden, int64_t inter,
                                double u_gu, double u_h) {
  MoeValues r;
  r.v.resize(inter);
  r.err.resize(inter);
  const double sq = std::sqrt(static_cast<double>(hidden) + 1.0);
  for (int64_t i = 0; i < inter; ++i) {
    double g = 0.0, u = 0.0, mg = 0.0, mu = 0.0;
    for (int64_t c = 0; c < hidden; ++c) {
      g += w13[i * hidden + c] * x[c];
      mg += std::fabs(w13[i * hidden + c] * x[c]);
      u += w13[(inter + i) * hidden + c] * x[c];
      mu += std::fabs(w13[(inter + i) * hidden + c] * x[c]);
    }
    const double dg = u_gu * std::fabs(g) + kMoeFp32Acc * sq * mg;
    const double du = u_gu * std::fabs(u) + kMoeFp32Acc * sq * mu;
    const double silu = g / (1.0 + std::exp(-g));
    r.v[i] = silu * u;
    const double carried = 1.1 * dg * (std::fabs(u) + du) + std::fabs(silu) * du;
    r.err[i] = carried + (u_h + kMoeFp32Acc) * (std::fabs(r.v[i]) + carried) + underflow_slack(u_h);
  }
  return r;
}

// One SwiGLU expert on one token (kjit_moe_forward's expert step): h as moe_swiglu_act gives it
// (g, u and h rounded to u_mid), then y[c] = w2[c] . h with w2 [H, I] row-major, rounded to
// u_out; err[c] carries h's errors through w2 and adds y's own.
inline MoeValues moe_swiglu_expert(const double* x, const double* w13, const double* w2,
                                   int64_t hidden, int64_t inter, double u_mid, double u_out) {
  const MoeValues h = moe_swiglu_act(x, w13, hidden, inter, u_mid, u_mid);
  MoeValues r;
  r.v.resize(hidden);
  r.err.resize(hidden);
  const double sq = std::sqrt(static_cast<double>(inter) + 1.0);
  for (int64_t c = 0; c < hidden; ++c) {
    double y = 0.0, m = 0.0, carried = 0.0;
    for (int64_t i = 0; i < inter; ++i) {
      y += w2[c * inter + i] * h.v[i];
      m += std::fabs(w2[c * inter + i] * h.v[i]);
      carried += std::fabs(w2[c * inter + i]) * h.err[i];
    }
    r.v[c] = y;
    r.err[c] = carried + kMoeFp32Acc * sq * (m + carried) + u_out * (std::fabs(y) + carried) +
               underflow_slack(u_out);
  }
  return r;
}

// One output of the fp8 block-scaled grouped GEMM (kjit_moe_grouped_gemm_fp8): a row of a (k e4m3
// codes, scale sa[c] per 128-wide K chunk c) times a row of b[e] (k codes, its 128 x 128 block's
// scales sb[c]), in fp64 on the dequantized operands (code value times scale), and the bound
// ref::gemm_fp8_error_bound gives it in out_dtype (the tensor cores' fp8 accumulation per chunk,
// fp32's, one rounding to out_dtype; "fp32" where the result stays in registers).
struct Fp8Element {
  double want = 0.0, bound = 0.0;
};

inline Fp8Element moe_gemm_fp8_element(const uint8_t* a, const float* sa, const uint8_t* b,
                                       const float* sb, int64_t k, const std::string& out_dtype) {
  double want = 0.0, sum_abs = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    const double p = e4m3_value(a[i]) * sa[i / 128] * (e4m3_value(b[i]) * sb[i / 128]);
    want += p;
    sum_abs += std::fabs(p);
  }
  const double bound = gemm_fp8_error_bound(
      a, b, k, [&](int64_t c) { return static_cast<double>(sa[c]) * sb[c]; }, 1.0, want, sum_abs,
      out_dtype);
  return Fp8Element{want, bound};
}

// silu(g) * u from a gate and an up output of the fp8 GEMM kept in fp32 (the SwiGLU epilogue),
// rounded once to a format of unit roundoff u_h: the value and how far a GPU's may land, each
// input's bound carried through the formula as moe_swiglu_act does (|silu'| <= 1.1).
inline Fp8Element moe_swiglu_of(const Fp8Element& g, const Fp8Element& u, double u_h) {
  const double silu = g.want / (1.0 + std::exp(-g.want));
  const double v = silu * u.want;
  const double carried = 1.1 * g.bound * (std::fabs(u.want) + u.bound) + std::fabs(silu) * u.bound;
  return Fp8Element{
      v, carried + (u_h + kMoeFp32Acc) * (std::fabs(v) + carried) + underflow_slack(u_h)};
}

}  // namespace kjit::ref
