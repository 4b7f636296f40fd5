// fp64 CPU references for rotary position embedding, written from the published formulas
// (FlashInfer / vLLM semantics, Meta's Llama 3.1 frequency scaling) rather than from the kernel.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace kjit::ref {

inline constexpr double kPi = 3.14159265358979323846;

// inv_freq[i] = theta^(-2i / rot_dim) / scale, i < rot_dim / 2: angle = (pos / scale) * freq.
inline std::vector<double> rope_inv_freq(int rot_dim, double scale, double theta) {
  std::vector<double> f(static_cast<size_t>(rot_dim / 2));
  for (int i = 0; i < rot_dim / 2; ++i) {
    f[static_cast<size_t>(i)] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / rot_dim) / scale;
  }
  return f;
}

// Llama 3.1 (Meta's apply_scaling): by wavelength, keep the high band, divide the low band by
// scale, and interpolate linearly in between.
inline std::vector<double> llama31_inv_freq(int rot_dim, double scale, double theta, double low,
                                            double high, double old_context_len) {
  std::vector<double> f(static_cast<size_t>(rot_dim / 2));
  const double low_wavelen = old_context_len / low;
  const double high_wavelen = old_context_len / high;
  for (int i = 0; i < rot_dim / 2; ++i) {
    const double freq = 1.0 / std::pow(theta, static_cast<double>(2 * i) / rot_dim);
    const double wavelen = 2 * kPi / freq;
    double out;
    if (wavelen < high_wavelen) {
      out = freq;
    } else if (wavelen > low_wavelen) {
      out = freq / scale;
    } else {
      const double smooth = (old_context_len / wavelen - low) / (high - low);
      out = (1 - smooth) * freq / scale + smooth * freq;
    }
    f[static_cast<size_t>(i)] = out;
  }
  return f;
}

// Rotates one head x[head_dim] into y with cos_a[i], sin_a[i] for i < rot_dim / 2. interleave:
// pairs (2i, 2i+1) (GPT-J); otherwise (i, i + rot_dim/2) (NeoX). Dims >= rot_dim are copied.
inline void rope_head(const double* x, double* y, int head_dim, int rot_dim, bool interleave,
                      const double* cos_a, const double* sin_a) {
  for (int d = rot_dim; d < head_dim; ++d) y[d] = x[d];
  const int half = rot_dim / 2;
  for (int i = 0; i < half; ++i) {
    const int i1 = interleave ? 2 * i : i;
    const int i2 = interleave ? 2 * i + 1 : i + half;
    y[i1] = x[i1] * cos_a[i] - x[i2] * sin_a[i];
    y[i2] = x[i2] * cos_a[i] + x[i1] * sin_a[i];
  }
}

// Index of the element that rotates with element d (d < rot_dim), and d's frequency index.
inline int rope_partner(int d, int rot_dim, bool interleave) {
  if (interleave) return d ^ 1;
  return d < rot_dim / 2 ? d + rot_dim / 2 : d - rot_dim / 2;
}

// FlashInfer's apply_rope positions: token t of request b (indptr[b] <= t < indptr[b + 1]) is at
// offsets[b] + t - indptr[b]; one entry per token, request by request.
inline std::vector<int64_t> indptr_positions(const std::vector<int64_t>& indptr,
                                             const std::vector<int64_t>& offsets) {
  std::vector<int64_t> pos;
  for (size_t b = 0; b + 1 < indptr.size(); ++b) {
    for (int64_t t = indptr[b]; t < indptr[b + 1]; ++t) pos.push_back(offsets[b] + t - indptr[b]);
  }
  return pos;
}

}  // namespace kjit::ref
