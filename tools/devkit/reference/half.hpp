// Host-side bf16 / fp16 <-> float conversions (round to nearest even), independent of the CUDA
// headers so references do not share code with the kernels they check.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace kjit::ref {

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t mag = x & 0x7FFFFFFF;
  if (mag >= 0x7F800000)
    return static_cast<uint16_t>(sign | 0x7C00 | (mag > 0x7F800000 ? 0x200 : 0));
  if (mag >= 0x477FF000) return static_cast<uint16_t>(sign | 0x7C00);  // rounds past 65504: inf
  if (mag < 0x38800000) {
    // Subnormal half (or zero): value = mag * 2^24 rounded to an integer count of 2^-24.
    float af;
    std::memcpy(&af, &mag, 4);
    float scaled = af * 16777216.0f;   // exact: 2^24
    float r = std::nearbyint(scaled);  // default rounding mode: nearest even
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
  }
  uint32_t exp = ((mag >> 23) - 112) << 10;
  uint32_t mant = (mag >> 13) & 0x3FF;
  uint32_t rest = mag & 0x1FFF;
  uint32_t h = exp | mant;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float fp16_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -f : f;
  }
  uint32_t u =
      exp == 31 ? (sign | 0x7F800000 | (mant << 13)) : (sign | ((exp + 112) << 23) | (mant << 13));
  std::memcpy(&f, &u, 4);
  return f;
}

// Element size and codecs for a dtype name ("fp32", "fp16", "bf16").
inline size_t elem_size(const std::string& dtype) {
  return dtype == "fp32" ? 4 : 2;
}

inline double load_elem(const void* base, size_t i, const std::string& dtype) {
  if (dtype == "fp32") return static_cast<const float*>(base)[i];
  uint16_t h = static_cast<const uint16_t*>(base)[i];
  return dtype == "bf16" ? bf16_to_float(h) : fp16_to_float(h);
}

inline void store_elem(void* base, size_t i, double v, const std::string& dtype) {
  float f = static_cast<float>(v);
  if (dtype == "fp32") {
    static_cast<float*>(base)[i] = f;
  } else {
    static_cast<uint16_t*>(base)[i] = dtype == "bf16" ? float_to_bf16(f) : float_to_fp16(f);
  }
}

// v as a kernel stores it in `dtype` (through fp32, nearest even).
inline double round_elem(double v, const std::string& dtype) {
  uint32_t buf = 0;
  store_elem(&buf, 0, v, dtype);
  return load_elem(&buf, 0, dtype);
}

// Unit roundoff of the dtype (half an ulp at 1.0).
inline double unit_roundoff(const std::string& dtype) {
  return dtype == "fp32" ? 0x1p-24 : dtype == "fp16" ? 0x1p-11 : 0x1p-8;
}

// The absolute part of one rounding to the format of unit roundoff u (fp32, fp16 or bf16): half
// the spacing of its subnormals, which u * |v| misses below the smallest normal. fp16's (2^-25)
// matters: a correctly rounded -3.8e-8 is stored as -5.96e-8, the nearest fp16.
inline double underflow_slack(double u) {
  return u == 0x1p-11 ? 0x1p-25 : u == 0x1p-8 ? 0x1p-134 : 0x1p-150;
}

}  // namespace kjit::ref
