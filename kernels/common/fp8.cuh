// float8_e4m3fn (OCP FP8: 1 sign, 4 exponent bits of bias 7, 3 mantissa bits, no infinities,
// S.1111.111 the only NaN, largest finite 448) in software, the same on every arch: the fp8
// fallback GEMM reads it and the quantization writes it. The sm_90a GEMM never converts (wgmma
// reads e4m3 directly).
#pragma once

#include "common/prelude.cuh"

namespace kjit {

// One e4m3 element as stored (a distinct type so to_float picks the decoding below).
struct E4M3 {
  u8 bits;
};

constexpr float kE4M3Max = 448.0f;

KJIT_DEVICE KJIT_FORCEINLINE float to_float(E4M3 x) {
  const u32 c = x.bits;
  const u32 mag = c & 0x7Fu;
  float v;
  if (mag == 0x7Fu) {
    v = __int_as_float(0x7FC00000);
  } else if (mag < 0x08u) {
    v = static_cast<float>(mag) * 0x1p-9f;  // subnormal: m * 2^-9, exact
  } else {
    v = __uint_as_float(((mag >> 3) + 120u) << 23 | (mag & 7u) << 20);
  }
  return (c & 0x80u) != 0 ? -v : v;
}

// Rounds to nearest even, saturating to +-448; NaN gives the NaN code.
KJIT_DEVICE KJIT_FORCEINLINE u8 e4m3_bits(float x) {
  const u32 sign = (__float_as_uint(x) >> 24) & 0x80u;
  if (x != x) return static_cast<u8>(sign | 0x7Fu);
  const float ax = fminf(fabsf(x), kE4M3Max);
  u32 mag;
  if (ax < 0x1p-6f) {
    // Subnormal range: a whole count of 2^-9 (rintf rounds half to even; 8 counts is the code of
    // the smallest normal, 2^-6, so the carry needs no case).
    mag = static_cast<u32>(rintf(ax * 0x1p9f));
  } else {
    // Round the fp32 mantissa to 3 bits (half to even), then rebias the exponent from 127 to 7.
    const u32 b = __float_as_uint(ax);
    mag = ((b + 0x7FFFFu + ((b >> 20) & 1u)) >> 20) - (120u << 3);
  }
  return static_cast<u8>(sign | mag);
}

}  // namespace kjit
