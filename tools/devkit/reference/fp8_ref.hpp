// Host-side float8_e4m3fn, written independently of kernels/common/fp8.cuh: decoding from the
// format's definition with ldexp, encoding by searching the 127 magnitudes for the nearest
// (ties to the even code), and the fp32 scale of a quantization group.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace kjit::ref {

inline double e4m3_value(uint8_t code) {
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return NAN;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (code & 0x80) != 0 ? -mag : mag;
}

// The exponent of the code's value as the format stores it: value = 1.mmm * 2^e for normals,
// 0.mmm * 2^-6 for subnormals (and zero).
inline int e4m3_exponent(uint8_t code) {
  const int e = (code >> 3) & 15;
  return e == 0 ? -6 : e - 7;
}

// Round to nearest, ties to even, saturating at 448 (no infinities in e4m3fn); NaN -> 0x7F.
inline uint8_t e4m3_code(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFF : 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double ax = std::fabs(static_cast<double>(x));
  uint8_t best = 0;
  double best_err = INFINITY;
  for (int c = 0; c <= 126; ++c) {
    const double err = std::fabs(e4m3_value(static_cast<uint8_t>(c)) - ax);
    if (err < best_err || (err == best_err && c % 2 == 0)) {
      best = static_cast<uint8_t>(c);
      best_err = err;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

// The scale of a group: its amax / 448 in fp32 (the division kjit_quant_fp8 does).
inline float fp8_scale(float amax) {
  return amax / 448.0f;
}

// One quantized element: e4m3(x / scale) in fp32, zeros under a zero scale.
inline uint8_t quantize_e4m3(float x, float scale) {
  return e4m3_code(scale > 0.0f ? x / scale : 0.0f);
}

// The codes a fused quantizer may write for q = y / scale, y the fp64 image of a value the
// kernel computes in fp32: e4m3(q), or within `slack` (relative) of a rounding midpoint either
// neighbour, since fp32's last bits may land on either side. {lo, hi}, equal away from midpoints.
inline std::pair<uint8_t, uint8_t> e4m3_code_range(double q, double slack = 0x1p-16) {
  return {e4m3_code(static_cast<float>(q * (1.0 - slack))),
          e4m3_code(static_cast<float>(q * (1.0 + slack)))};
}

}  // namespace kjit::ref
