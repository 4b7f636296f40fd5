// fp8 quantization fused into the op that produces its input, so the bf16 / fp16 intermediate is
// never stored nor rounded: the value quantized is the fp32 one the op computes.
//
//   rmsnorm_quant_fp8:  [residual = DTYPE(x + residual), as kjit_fused_add_rmsnorm]
//                       y = float(s) * rsqrt(mean(float(s)^2) + eps) * float(w), s = the residual
//                       or x; scale[r] = max |y| over the row / 448; out = e4m3(y / scale[r])
//   silu_and_mul_quant_fp8:  y = silu(gate) * up in fp32 (act_and_mul.cuh's Silu);
//                       scale[r, g] = max |y| over the 1 x 128 group / 448; out = e4m3(y / scale)
//
// Rounding: one, the e4m3 one (quant_fp8.cuh's, nearest even, saturating); a zero scale writes
// zeros. The scales are what kjit_gemm_fp8 reads as scale_a (per row; per 1 x 128 group).
#pragma once

#include "activation/act_and_mul.cuh"
#include "norm/fused_add_rmsnorm.cuh"
#include "quant/quant_fp8.cuh"

namespace kjit {
namespace quant {

// VEC codes at dst (aligned to VEC bytes) in one store.
template <int VEC>
KJIT_DEVICE KJIT_FORCEINLINE void store_codes(u8* dst, const u8 (&c)[VEC]) {
  if constexpr (VEC == 8) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(c[0] | c[1] << 8 | c[2] << 16 | u32(c[3]) << 24,
                                                c[4] | c[5] << 8 | c[6] << 16 | u32(c[7]) << 24);
  } else if constexpr (VEC == 4) {
    *reinterpret_cast<u32*>(dst) = c[0] | c[1] << 8 | c[2] << 16 | u32(c[3]) << 24;
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) dst[e] = c[e];
  }
}

// Both kernels may be launched as programmatic dependents (src/ops/pdl.hpp), like the norm and
// activation they fuse.
//
// Launch: grid = rows, kQuantThreads threads, no dynamic shared memory. input, residual, weight,
// out and their row strides aligned to VEC elements (out: VEC bytes); hidden a multiple of VEC.
// input and residual must not overlap each other or out; RESIDUAL: p.residual is read and
// overwritten with the sum (the same rounding as kjit_fused_add_rmsnorm, so the residual stream
// matches the unfused op bit for bit). Each thread re-reads only the vectors it stored itself.
template <typename DTYPE, int VEC, bool RESIDUAL>
__global__ void __launch_bounds__(kQuantThreads)
    rmsnorm_quant_fp8_kernel(const __grid_constant__ RmsNormQuantFp8Params p) {
  pdl_enter();  // before any global access: see prelude.cuh
  using V = Vec<DTYPE, VEC>;
  const i64 row = blockIdx.x;
  const int vecs = static_cast<int>(p.hidden / VEC);
  const DTYPE* x = static_cast<const DTYPE*>(p.input) + row * p.in_stride;
  DTYPE* res = RESIDUAL ? static_cast<DTYPE*>(p.residual) + row * p.res_stride : nullptr;
  const DTYPE* src = RESIDUAL ? res : x;
  const DTYPE* w = static_cast<const DTYPE*>(p.weight);

  float ss = 0.0f;
  for (int v = threadIdx.x; v < vecs; v += kQuantThreads) {
    V xv;
    xv.load(x + i64(v) * VEC);
    if constexpr (RESIDUAL) {
      V rv, sv;
      rv.load(res + i64(v) * VEC);
      ss = norm::fused_add_rmsnorm::add_rows(sv, xv, rv, ss);
      sv.store(res + i64(v) * VEC);
    } else {
      ss = norm::detail::add_squares(ss, xv);
    }
  }
  __shared__ float partials[kQuantThreads / 32];
  const float inv_rms =
      rsqrtf(norm::detail::row_sum<kQuantThreads, true>(ss, partials) / float(p.hidden) + p.eps);

  // Two passes over the row (the second from L1 / L2): the amax, then the codes; y is the same
  // expression in both, so the element that set the scale lands on +-448.
  auto normed = [&](const V& s, const V& wv, int e) {
    return to_float(s[e]) * inv_rms * to_float(wv[e]);
  };
  float m = 0.0f;
  for (int v = threadIdx.x; v < vecs; v += kQuantThreads) {
    V sv, wv;
    sv.load(src + i64(v) * VEC);
    wv.load_ro(w + i64(v) * VEC);
#pragma unroll
    for (int e = 0; e < VEC; ++e) m = fmaxf(m, fabsf(normed(sv, wv, e)));
  }
  const float scale = block_max(m) / kE4M3Max;
  if (threadIdx.x == 0) p.scale[row] = scale;
  u8* out = static_cast<u8*>(p.out) + row * p.out_stride;
  for (int v = threadIdx.x; v < vecs; v += kQuantThreads) {
    V sv, wv;
    sv.load(src + i64(v) * VEC);
    wv.load_ro(w + i64(v) * VEC);
    u8 c[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      c[e] = e4m3_bits(scale > 0.0f ? normed(sv, wv, e) / scale : 0.0f);
    }
    store_codes<VEC>(out + i64(v) * VEC, c);
  }
}

// Launch: kQuantThreads threads, one warp per 1 x 128 group of an out row,
// ceil(rows * groups / (kQuantThreads / 32)) blocks. Element alignment only; out and scale must
// not overlap input.
template <typename DTYPE>
__global__ void __launch_bounds__(kQuantThreads)
    silu_and_mul_quant_fp8_kernel(const __grid_constant__ ActQuantFp8Params p) {
  pdl_enter();  // before any global access: see prelude.cuh
  constexpr int kPerLane = kQuantGroup / 32;
  GroupLane g;
  if (!group_lane(p.rows, p.groups, g)) return;
  const i64 r = g.row, c0 = g.col0;
  const DTYPE* gate = static_cast<const DTYPE*>(p.input) + r * p.in_stride;
  const DTYPE* up = gate + p.d;
  float y[kPerLane];
  float m = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const i64 c = c0 + 32 * j;
    y[j] = c < p.d ? activation::Silu::apply(to_float(gate[c])) * to_float(up[c]) : 0.0f;
    m = fmaxf(m, fabsf(y[j]));
  }
  const float scale = warp_max(m) / kE4M3Max;
  if (threadIdx.x % 32 == 0) p.scale[g.group] = scale;
  u8* out = static_cast<u8*>(p.out) + r * p.out_stride;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const i64 c = c0 + 32 * j;
    if (c < p.d) out[c] = e4m3_bits(scale > 0.0f ? y[j] / scale : 0.0f);
  }
}

}  // namespace quant
}  // namespace kjit
