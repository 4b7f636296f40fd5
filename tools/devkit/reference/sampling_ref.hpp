// CPU references of the sampling family, written from the definitions in kjit.h (not from the
// kernels): Philox4x32-10, the top-k / top-p / min-p sets with their tie rules (by sorting, in
// fp64), softmax, argmax, and the inverse-CDF draw.
//
// The kernels decide set membership with fp32 weights and fp32 / fixed-point sums, so a token
// whose decision is within rounding of the boundary may go either way. keep_sets() therefore
// returns, per token, whether it must be kept, may be kept (inside the rounding band), or must
// not be kept; tests accept a draw in "may" and count how many tokens sat in the band.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace kjit::ref {

// ---- Philox4x32-10 ------------------------------------------------------------------------------

struct Philox4 {
  uint32_t v[4];
};

inline Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  const uint64_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = m0 * ctr.v[0];
    const uint64_t p1 = m1 * ctr.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

// The uniform kjit draws for a row (kjit.h: key = seed, counter = (offset, subsequence, draw);
// draw 0 for the samplers, 0..n for chain speculative sampling).
inline double sampling_uniform(uint64_t seed, uint64_t offset, uint32_t subsequence,
                               uint32_t draw = 0) {
  const Philox4 r = philox4x32_10(Philox4{{static_cast<uint32_t>(offset),
                                           static_cast<uint32_t>(offset >> 32), subsequence, draw}},
                                  static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 21) ^ (r.v[1] >> 11);
  return static_cast<double>(bits) / 9007199254740992.0;
}

// ---- Sets ---------------------------------------------------------------------------------------

enum class Keep : uint8_t { kNo = 0, kMay = 1, kMust = 2 };

struct FilterSpec {
  int top_k = 0;         // 0 or >= vocab: off
  double top_p = 1.0;    // >= 1: off
  double min_p = 0.0;    // <= 0: off
  double value_tol = 0;  // relative band on values (top-k / min-p boundaries)
  double mass_tol = 0;   // relative band on masses (top-p boundary)
};

// The same filters with no tolerance band: the documented rule applied exactly in fp64, for
// checks that need one set (inverse_cdf, target_distribution) rather than a range of sets.
inline FilterSpec exact(FilterSpec f) {
  f.value_tol = 0;
  f.mass_tol = 0;
  return f;
}

// Per token: must / may / must-not be kept, for non-negative weights w (kjit.h's rules: top-k
// keeps w >= the k-th largest; top-p keeps a token when the mass strictly above it is < p times
// the mass of the top-k set (the row without top-k); min-p keeps w >= fl32(min_p * max)).
inline std::vector<Keep> keep_sets(const std::vector<double>& w, const FilterSpec& f) {
  const size_t n = w.size();
  std::vector<Keep> keep(n, Keep::kMust);
  std::vector<double> sorted(w);
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  auto downgrade = [&](size_t i, Keep k) { keep[i] = std::min(keep[i], k); };
  auto band = [&](size_t i, double v, double thr, double tol) {
    // v >= thr keeps; within the relative band either answer is acceptable.
    const double t = tol * std::max(std::fabs(thr), std::numeric_limits<double>::min());
    if (v >= thr + t) return;
    downgrade(i, v >= thr - t ? Keep::kMay : Keep::kNo);
  };
  double set_mass = std::accumulate(w.begin(), w.end(), 0.0);
  double vk = -1.0;
  const bool use_k = f.top_k > 0 && static_cast<size_t>(f.top_k) < n;
  if (use_k) {
    vk = sorted[static_cast<size_t>(f.top_k) - 1];
    for (size_t i = 0; i < n; ++i) band(i, w[i], vk, f.value_tol);
    set_mass = 0;
    for (double v : w) set_mass += v >= vk ? v : 0.0;
  }
  if (f.top_p < 1.0) {
    // mass strictly above each distinct value, from the top.
    const double target = f.top_p * set_mass;
    const double mt = f.mass_tol * set_mass;
    std::vector<std::pair<double, double>> above;  // (value, mass strictly above it)
    double run = 0;
    for (size_t j = 0; j < n;) {
      size_t e = j;
      double group = 0;
      while (e < n && sorted[e] == sorted[j]) group += sorted[e++];
      above.push_back({sorted[j], run});
      run += group;
      j = e;
    }
    for (size_t i = 0; i < n; ++i) {
      auto it = std::lower_bound(
          above.begin(), above.end(), w[i],
          [](const std::pair<double, double>& a, double v) { return a.first > v; });
      const double m = it->second;
      if (m < target - mt) continue;
      downgrade(i, m < target + mt ? Keep::kMay : Keep::kNo);
    }
  }
  if (f.min_p > 0.0) {
    const float thr = static_cast<float>(f.min_p) * static_cast<float>(sorted.front());
    for (size_t i = 0; i < n; ++i) band(i, w[i], thr, f.value_tol);
  }
  // A zero weight is never drawn.
  for (size_t i = 0; i < n; ++i) {
    if (w[i] <= 0.0) keep[i] = Keep::kNo;
  }
  return keep;
}

// A renormalized row checked against the weights it came from: every must-keep token nonzero,
// every must-drop token zero, each nonzero value w / (mass of the set the kernel kept) within a
// relative 1e-5, and the kept set a threshold (everything at or above one weight, ties together).
// The divisor is the kept set's mass, not "must + may": a top-p band of 1e-4 of the mass holds
// ~10 tokens of a 128256-token row, each ~3e-5 of the kept mass, so counting the ones the kernel
// rightly dropped would put every kept value off by more than the tolerance.
struct RenormCheck {
  long bad = 0;           // tokens that break the rules above
  long in_band = 0;       // tokens that may go either way
  bool threshold = true;  // the kept set is a threshold set
  double sum = 0;         // of the row's output (1 for a row with any mass)
  long first_bad = -1;    // index of the first bad token, for a message
  double first_got = 0, first_want = 0;
};

inline RenormCheck check_renorm_row(const std::vector<double>& w, const std::vector<Keep>& keep,
                                    const float* got) {
  RenormCheck c;
  double mass = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (got[i] != 0.0f) mass += w[i];
  }
  double min_kept = std::numeric_limits<double>::infinity(), max_dropped = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const double g = got[i];
    c.sum += g;
    const double want = w[i] / mass;
    const bool zero_ok = keep[i] != Keep::kMust;
    const bool value_ok = keep[i] != Keep::kNo && std::fabs(g - want) <= 1e-5 * want;
    if (!((zero_ok && g == 0.0) || value_ok)) {
      if (c.bad++ == 0) {
        c.first_bad = static_cast<long>(i);
        c.first_got = g;
        c.first_want = keep[i] == Keep::kNo ? 0.0 : want;
      }
    }
    c.in_band += keep[i] == Keep::kMay;
    if (g != 0.0) min_kept = std::min(min_kept, w[i]);
    if (g == 0.0 && w[i] > 0) max_dropped = std::max(max_dropped, w[i]);
  }
  c.threshold = max_dropped < min_kept;
  return c;
}

// The distribution a draw should follow: w renormalized over the kept tokens (kMay counts as
// kept, so use it on rows whose band is empty).
inline std::vector<double> target_distribution(const std::vector<double>& w,
                                               const std::vector<Keep>& keep) {
  std::vector<double> p(w.size(), 0.0);
  double s = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (keep[i] != Keep::kNo) s += w[i];
  }
  for (size_t i = 0; i < w.size(); ++i) {
    if (keep[i] != Keep::kNo) p[i] = w[i] / s;
  }
  return p;
}

// The inverse-CDF draw in index order: the first kept token whose inclusive prefix exceeds
// u * total. kMay counts as kept, so pass a set without a band (exact()): a band token changes
// total, and with it the pick of most draws whose target lies beyond it.
inline int64_t inverse_cdf(const std::vector<double>& w, const std::vector<Keep>& keep, double u) {
  double total = 0;
  for (size_t i = 0; i < w.size(); ++i) total += keep[i] != Keep::kNo ? w[i] : 0.0;
  const double target = u * total;
  double run = 0;
  int64_t last = -1;
  for (size_t i = 0; i < w.size(); ++i) {
    if (keep[i] == Keep::kNo || w[i] <= 0) continue;
    run += w[i];
    last = static_cast<int64_t>(i);
    if (target < run) return last;
  }
  return last;
}

// ---- Softmax and argmax -------------------------------------------------------------------------

// exp((x - max) / t) / sum in fp64; empty when the row is invalid (NaN / +Inf / all -Inf).
inline std::vector<double> softmax(const std::vector<double>& x, double t) {
  double m = -std::numeric_limits<double>::infinity();
  for (double v : x) {
    if (std::isnan(v) || v == std::numeric_limits<double>::infinity()) return {};
    m = std::max(m, v);
  }
  if (!std::isfinite(m)) return {};
  std::vector<double> p(x.size());
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += p[i] = std::exp((x[i] - m) / t);
  for (double& v : p) v /= s;
  return p;
}

// torch.topk(x, k, sorted=True)'s indices with kjit_top_k's order: descending values, NaN above
// +inf, equal values (-0 and +0 included) by ascending index.
inline std::vector<int64_t> top_k(const std::vector<double>& x, int64_t k) {
  std::vector<int64_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), int64_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
    const bool na = std::isnan(x[a]), nb = std::isnan(x[b]);
    return na || nb ? na && !nb : x[a] > x[b];
  });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

// torch.argmax: the first maximum, NaN the largest.
inline int64_t argmax(const std::vector<double>& x) {
  int64_t best = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[best])) break;
    if (std::isnan(x[i]) || x[i] > x[best]) best = static_cast<int64_t>(i);
  }
  return best;
}

// Chi-square statistic of `counts` (n draws) against `p`, over tokens with p > 0; draws of
// tokens with p == 0 are returned in `impossible`.
inline double chi_square(const std::vector<long>& counts, const std::vector<double>& p, long n,
                         int& dof, long& impossible) {
  double chi = 0;
  dof = -1;
  impossible = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) {
      impossible += counts[i];
      continue;
    }
    const double e = p[i] * static_cast<double>(n);
    chi += (counts[i] - e) * (counts[i] - e) / e;
    ++dof;
  }
  return chi;
}

// The bound the distribution tests put on chi_square: ~6 standard deviations of the chi-square
// law above its mean, so a correct sampler passes and one drawing from another distribution
// fails by far.
inline double chi_square_limit(int dof) {
  return dof + 6.0 * std::sqrt(2.0 * std::max(dof, 1)) + 10.0;
}

// z-score of the draws' mean of score[i] against its mean under p: (mean - E_p) / (sd_p /
// sqrt(n)); |z| < 6 for a correct sampler. With the logits as the score this is the most powerful
// test of the temperature (a factor 1 + e on T moves E[x] by about -e Var(x) / T), which a
// chi-square spreads over all its degrees of freedom.
inline double mean_score_z(const std::vector<long>& counts, const std::vector<double>& p,
                           const std::vector<double>& score, long n) {
  double mean = 0, ep = 0, ep2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    mean += static_cast<double>(counts[i]) * score[i];
    ep += p[i] * score[i];
    ep2 += p[i] * score[i] * score[i];
  }
  mean /= static_cast<double>(n);
  const double sd = std::sqrt(std::max(ep2 - ep * ep, 1e-300));
  return (mean - ep) / (sd / std::sqrt(static_cast<double>(n)));
}

// ---- Chain speculative sampling ---------------------------------------------------------------

// One request of kjit_chain_speculative_sampling from kjit.h's definition: the outputs, the
// drawn token's position and the weights and uniform it was drawn with (so a test can accept a
// neighbour when u * total falls within rounding of a boundary).
struct SpeculativeRow {
  std::vector<int32_t> out;
  int accepted = 0;
  int emitted = 0;
  int pos = 0;
  std::vector<double> w;
  double u = 0;
};

// draft: [n, vocab], target: [n + 1, vocab] (row-major), ids: [n].
inline SpeculativeRow chain_speculative(const float* draft, const int32_t* ids, const float* target,
                                        int n, int vocab, uint64_t seed, uint64_t offset,
                                        uint32_t subsequence) {
  SpeculativeRow r;
  r.out.assign(static_cast<size_t>(n) + 1, -1);
  int pos = n;
  for (int i = 0; i < n; ++i) {
    const int32_t d = ids[i];
    bool ok = false;
    if (d >= 0 && d < vocab) {
      const double u = sampling_uniform(seed, offset, subsequence, static_cast<uint32_t>(i));
      ok = u * static_cast<double>(draft[static_cast<size_t>(i) * vocab + d]) <
           static_cast<double>(target[static_cast<size_t>(i) * vocab + d]);
    }
    r.accepted += ok ? 1 : 0;
    if (!ok && pos == n) pos = i;
  }
  for (int i = 0; i < pos; ++i) r.out[static_cast<size_t>(i)] = ids[i];
  r.emitted = r.pos = pos;
  // The residual max(0, p - q) in fp32 as kjit.h defines it (a NaN stays NaN), or p itself.
  const float* p = target + static_cast<size_t>(pos) * vocab;
  const float* q = draft + static_cast<size_t>(pos < n ? pos : 0) * vocab;
  r.w.assign(static_cast<size_t>(vocab), 0.0);
  double total = 0;
  for (bool residual : {pos < n, false}) {
    total = 0;
    for (int v = 0; v < vocab; ++v) {
      const float d = p[v] - q[v];
      const float w = !residual ? p[v] : (d > 0.0f || std::isnan(d) ? d : 0.0f);
      r.w[static_cast<size_t>(v)] = w;
      total += w;
    }
    if (!residual || total > 0) break;
  }
  r.u = sampling_uniform(seed, offset, subsequence, static_cast<uint32_t>(n));
  if (!(total > 0 && total < 1e300)) return r;  // -1 at pos
  r.out[static_cast<size_t>(pos)] =
      static_cast<int32_t>(inverse_cdf(r.w, std::vector<Keep>(r.w.size(), Keep::kMust), r.u));
  return r;
}

// Whether `token` may be the draw of `row` (weights w, uniform u): the reference's own pick, or a
// token with weight whose CDF interval lies within 1e-9 of the total from u * total (a boundary
// the kernel's differently ordered sums may put on either side).
inline bool speculative_draw_ok(const SpeculativeRow& row, int32_t token) {
  const int32_t want = row.out[static_cast<size_t>(row.pos)];
  if (token == want) return true;
  if (want < 0 || token < 0 || static_cast<size_t>(token) >= row.w.size()) return false;
  if (!(row.w[static_cast<size_t>(token)] > 0)) return false;
  double total = 0, lo = 0;
  for (size_t i = 0; i < row.w.size(); ++i) {
    if (i == static_cast<size_t>(token)) lo = total;
    total += row.w[i];
  }
  const double goal = row.u * total, hi = lo + row.w[static_cast<size_t>(token)];
  return goal >= lo - 1e-9 * total && goal <= hi + 1e-9 * total;
}

}  // namespace kjit::ref
