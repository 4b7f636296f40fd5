// fp64 CPU references for decode attention over a paged KV cache and for merging attention
// states, written from the definitions in kjit.h (FlashInfer's batch decode and merge_state),
// independently of the kernels: plain loops, a two-pass softmax, the fp8 format decoded from its
// fields.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace kjit::ref {

// OCP fp8 e4m3 ("fn": no infinities, S.1111.111 is NaN), from its sign, exponent and mantissa.
inline double e4m3_to_double(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
  if (exp == 15 && man == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = exp == 0 ? std::ldexp(man / 8.0, -6) : std::ldexp(1.0 + man / 8.0, exp - 7);
  return sign ? -mag : mag;
}

struct DecodeRefArgs {
  int64_t batch = 0, qo_heads = 0, kv_heads = 0, head_dim = 0, page_size = 0, num_pages = 0;
  double sm_scale = 0, soft_cap = 0, k_scale = 1, v_scale = 1;
  int window_left = -1;
  std::vector<int32_t> indptr, indices, last_page_len;
};

// The positions request b attends to, [start, len), by kjit's documented rules: len from the
// page count and the last page's length clamped to [0, page_size] (0 for an empty or inverted
// range), start from the window.
inline void decode_ref_range(const DecodeRefArgs& a, int64_t b, int64_t& start, int64_t& len) {
  const int64_t first = a.indptr[static_cast<size_t>(b)];
  const int64_t end = a.indptr[static_cast<size_t>(b + 1)];
  len = 0;
  if (first >= 0 && end > first) {
    const int64_t lp = std::clamp<int64_t>(a.last_page_len[static_cast<size_t>(b)], 0, a.page_size);
    len = (end - first - 1) * a.page_size + lp;
  }
  start = a.window_left >= 0 ? std::max<int64_t>(0, len - 1 - a.window_left) : 0;
}

// The page holding position t of request b, or -1 when the table does not give a valid one
// (those positions contribute nothing).
inline int64_t decode_ref_page(const DecodeRefArgs& a, int64_t b, int64_t t) {
  const int64_t first = a.indptr[static_cast<size_t>(b)];
  const int64_t end = std::min<int64_t>(a.indptr[static_cast<size_t>(b + 1)],
                                        static_cast<int64_t>(a.indices.size()));
  const int64_t gi = first + t / a.page_size;
  if (gi >= end) return -1;
  const int64_t page = a.indices[static_cast<size_t>(gi)];
  return page >= 0 && page < a.num_pages ? page : -1;
}

// How far a correct decode kernel's outputs may be from the exact ones, element by element, given
// the precision of its arithmetic; decode_attention fills `out` and `lse` when given one.
//
// The arithmetic is a flash-decoding kernel's: logits in fp32 from exact products (16-bit or fp8
// inputs), p = exp2(logit - running max) in fp32, the numerator sum_j p_j v_j on tensor cores with
// p rounded to the P.V operand type and fp32 accumulation, the denominator summing the unrounded p
// in fp32, split partials merged in fp32, one rounding of the output. Per output element:
//
//   P: the rounding of each p_j, |delta_j| <= b_j = u_p p_j + eta_p / Z (normalized; eta_p is the
//      absolute error of an fp16 p below the normal range, Z = sum_j exp(logit_j - max) >= 1), is
//      an error sum_j delta_j v_j. Its worst case sum_j b_j |v_j| is the bound for a few
//      positions; for many, the roundings of distinct random values are independent and zero-mean,
//      so by Hoeffding |sum| <= 6 sqrt(sum_j b_j^2 v_j^2) fails with probability below 2 exp(-18)
//      (and their actual spread, b_j / sqrt(3), puts that at ten standard deviations). This is
//      what scales with the output instead of with max|v|: at 8192 positions it is ~100 times
//      smaller than u_p max|v|, so losing a few percent of the positions shows.
//   fp32: accumulating n = len / 16 tensor-core steps into one register, as many running-max
//      rescales, the denominator's sum and the merges, each off by at most ~2^-23 of the
//      magnitudes involved (A = sum_j p_j |v_j|), plus logits off by a few fp32 ulps of
//      sum_d |q_d k_d| scaled (S), which move each p_j relatively by as much:
//      (n + 16) 2^-22 A + 32 u32 S A.
//   output: one rounding, u_out |out| (half an ulp), on top of the above.
// lse (natural log, fp32): its error is the relative error of the sum of exponentials (fp32 sums
// of random terms: ~u32 sqrt(n), under 1e-6 for n = 8192; exp2f and log2f within a few ulps) plus
// the logits' own error and the fp32 rounding of the result: 1e-5 + 32 u32 max(|lse|, S). Losing
// one position of 8192 moves lse by its probability, ~1e-4.
struct DecodeTolerance {
  double u_p = 0x1p-8;    // unit roundoff of the probabilities fed to P.V
  double eta_p = 0.0;     // absolute rounding error of a subnormal probability (fp16: 2^-25)
  double u_out = 0x1p-8;  // unit roundoff of the output type
  std::vector<double> out, lse;
};

// One query's output against n keys (the tolerance model above): qk(j, d) is the product of the
// query's and key j's element d, v(j, d) key j's value (scaled); logits are scale * sum_d qk(j,
// d), soft-capped when soft_cap > 0. Writes o[0..D) and, with tol, the tolerances tol_out[0..D)
// and *tol_lse; returns the lse (natural log). n = 0 leaves o alone and returns -inf.
template <class QK, class V>
double attend_query(size_t n, int64_t D, double scale, double soft_cap, QK&& qk, V&& v, double* o,
                    const DecodeTolerance* tol, double* tol_out, double* tol_lse) {
  if (n == 0) return -std::numeric_limits<double>::infinity();
  std::vector<double> x(n);
  double mx = -std::numeric_limits<double>::infinity();
  double s_abs = 0, x_abs = 0;  // largest scaled sum_d |q_d k_d| and |logit|
  for (size_t j = 0; j < n; ++j) {
    double dot = 0, dot_abs = 0;
    for (int64_t d = 0; d < D; ++d) {
      const double t = qk(j, d);
      dot += t;
      dot_abs += std::fabs(t);
    }
    double logit = scale * dot;
    if (soft_cap > 0) logit = soft_cap * std::tanh(logit / soft_cap);
    x[j] = logit;
    mx = std::max(mx, logit);
    s_abs = std::max(s_abs, std::fabs(scale) * dot_abs);
    x_abs = std::max(x_abs, std::fabs(logit));
  }
  double sum = 0;
  for (double& e : x) {
    e = std::exp(e - mx);
    sum += e;
  }
  std::vector<double> vv(static_cast<size_t>(D)), worst, spread, mag;
  if (tol) {
    worst.assign(static_cast<size_t>(D), 0.0);
    spread.assign(static_cast<size_t>(D), 0.0);
    mag.assign(static_cast<size_t>(D), 0.0);
  }
  for (size_t j = 0; j < n; ++j) {
    const double p = x[j] / sum;
    for (int64_t d = 0; d < D; ++d) vv[d] = v(j, d);
    for (int64_t d = 0; d < D; ++d) o[d] += p * vv[d];
    if (!tol) continue;
    const double bj = tol->u_p * p + tol->eta_p / sum;
    for (int64_t d = 0; d < D; ++d) {
      const double av = std::fabs(vv[d]);
      worst[d] += bj * av;
      spread[d] += bj * bj * av * av;
      mag[d] += p * av;
    }
  }
  constexpr double u32 = 0x1p-24;
  if (tol) {
    const double steps = static_cast<double>(n) / 16.0;
    const double fp32 = (steps + 16) * 0x1p-22 + 32 * u32 * s_abs;
    for (int64_t d = 0; d < D; ++d) {
      const double pv = std::min(worst[d], 6.0 * std::sqrt(spread[d]));
      tol_out[d] = (1 + tol->u_out) * (pv + fp32 * mag[d]) + tol->u_out * std::fabs(o[d]) + 1e-6;
    }
  }
  const double lse = mx + std::log(sum);
  if (tol) *tol_lse = 1e-5 + 32 * u32 * std::max({std::fabs(lse), s_abs, x_abs});
  return lse;
}

// Runs f(i, 0) for i in [0, n) in order: the references' default way through their rows.
struct SequentialRows {
  template <class F>
  void operator()(int64_t n, F&& f) const {
    for (int64_t i = 0; i < n; ++i) f(i, 0);
  }
};

// out[b][i][d] and lse[b][i] (natural log) for every request b and qo head i. q(b, i, d),
// k(page, slot, kv_head, d) and v(...) return the stored values as doubles (fp8: decoded, not
// scaled). An empty request gives out = 0, lse = -inf. rows(n, f) calls f(unit, worker) once for
// each of the batch x kv_heads units (request b = unit / kv_heads, kv head unit % kv_heads, and
// the qo heads of its group), in any order and from any threads (the GPU tests pass
// test::parallel_rows): a unit writes its own rows only, and q, k and v must be safe to call at
// once. A unit reads each key and value of its kv head once, for all the group's queries (the
// accessors cost more than the arithmetic); the sums are the same whatever the split.
template <class Q, class K, class V, class Rows = SequentialRows>
void decode_attention(const DecodeRefArgs& a, Q&& q, K&& k, V&& v, std::vector<double>& out,
                      std::vector<double>& lse, DecodeTolerance* tol = nullptr,
                      Rows&& rows = Rows{}) {
  const int64_t D = a.head_dim, group = a.qo_heads / a.kv_heads;
  out.assign(static_cast<size_t>(a.batch * a.qo_heads * D), 0.0);
  lse.assign(static_cast<size_t>(a.batch * a.qo_heads), -std::numeric_limits<double>::infinity());
  if (tol) {
    tol->out.assign(out.size(), 1e-6);
    tol->lse.assign(lse.size(), 0.0);
  }
  rows(a.batch * a.kv_heads, [&](int64_t unit, int) {
    const int64_t b = unit / a.kv_heads, h = unit % a.kv_heads;
    int64_t start = 0, len = 0;
    decode_ref_range(a, b, start, len);
    // The request's keys and values of head h, decoded once: [n][D] each.
    std::vector<double> kd, vd;
    size_t n = 0;
    for (int64_t t = start; t < len; ++t) {
      const int64_t page = decode_ref_page(a, b, t);
      if (page < 0) continue;
      for (int64_t d = 0; d < D; ++d) {
        kd.push_back(k(page, t % a.page_size, h, d));
        vd.push_back(a.v_scale * v(page, t % a.page_size, h, d));
      }
      ++n;
    }
    if (n == 0) return;
    std::vector<double> qd(static_cast<size_t>(D));
    for (int64_t i = h * group; i < (h + 1) * group; ++i) {
      for (int64_t d = 0; d < D; ++d) qd[static_cast<size_t>(d)] = q(b, i, d);
      const size_t row = static_cast<size_t>(b * a.qo_heads + i);
      const auto at = [D](size_t j, int64_t d) { return j * static_cast<size_t>(D) + d; };
      lse[row] = attend_query(
          n, D, a.sm_scale * a.k_scale, a.soft_cap,
          [&](size_t j, int64_t d) { return qd[static_cast<size_t>(d)] * kd[at(j, d)]; },
          [&](size_t j, int64_t d) { return vd[at(j, d)]; }, &out[row * static_cast<size_t>(D)],
          tol, tol ? &tol->out[row * static_cast<size_t>(D)] : nullptr,
          tol ? &tol->lse[row] : nullptr);
    }
  });
}

// Merged state of n states with log-sum-exps s[i] (natural log) and values v(i, d):
// s_out = log(sum_i exp(s[i])), v_out[d] = sum_i exp(s[i] - s_out) v(i, d). States with
// s = -inf are empty; all empty gives v_out = 0, s_out = -inf.
template <class V>
void merge_states(const std::vector<double>& s, int64_t dim, V&& v, std::vector<double>& v_out,
                  double& s_out) {
  v_out.assign(static_cast<size_t>(dim), 0.0);
  double mx = -std::numeric_limits<double>::infinity();
  for (double si : s) mx = std::max(mx, si);
  if (mx == -std::numeric_limits<double>::infinity()) {
    s_out = mx;
    return;
  }
  double sum = 0;
  for (double si : s) sum += std::exp(si - mx);
  s_out = mx + std::log(sum);
  for (size_t i = 0; i < s.size(); ++i) {
    const double w = std::exp(s[i] - s_out);
    if (w == 0) continue;
    for (int64_t d = 0; d < dim; ++d) v_out[static_cast<size_t>(d)] += w * v(i, d);
  }
}

}  // namespace kjit::ref
