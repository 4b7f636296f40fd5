// Gated MLP activations (SwiGLU / GeGLU): the input row is [gate | up], each half d wide.
//
//   out[r, i] = DTYPE(act(float(in[r, i])) * float(in[r, d + i]))      0 <= i < d
//
//   ACT Silu:      act(x) = x / (1 + exp(-x))
//   ACT Gelu:      act(x) = 0.5 x (1 + erf(x / sqrt(2)))
//   ACT GeluTanh:  act(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   ACT Sigmoid:   act(x) = 1 / (1 + exp(-x))   (the GLU gate)
//
// Purely bandwidth-bound (6 bytes per bf16 output element against ~40 fp32 instructions at
// most), so each input byte is read once with the widest vector the alignment allows, and each
// thread issues all its loads before any math so several accesses are in flight per thread.
// d is a run-time value: specializing on it would multiply the catalog by every model's
// intermediate size while the only thing it would save is a shift and a compare per vector.
#pragma once

#include "activation/activation_params.h"
#include "common/prelude.cuh"
#include "common/vec.cuh"

namespace kjit {
namespace activation {

// The activations: one functor each, named in the host's table of activations
// (src/ops/activation/activation.hpp), which passes it as the kernel's ACT.

struct Silu {
  KJIT_DEVICE static KJIT_FORCEINLINE float apply(float x) {
    // __expf and __fdividef keep this at two MUFU ops. Both tails are right: exp(-x) = inf gives
    // x * rcp(inf) = -0 for very negative x, and exp(-x) = 0 gives x for very positive x.
    // Error: a few fp32 ulp, growing like |x| ulp through __expf (see docs/c-api.md).
    return __fdividef(x, 1.0f + __expf(-x));
  }
};

struct Gelu {
  KJIT_DEVICE static KJIT_FORCEINLINE float apply(float x) {
    // The same formula as PyTorch's exact GELU. erff is ~30 instructions; normcdff would be
    // accurate deep in the negative tail but costs three times that, more than the bandwidth
    // budget. Near x = -4 and below, 1 + erf cancels: the error there is absolute, about
    // |x| * 2^-24, on values that are themselves below |x| * 1e-4.
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
  }
};

struct GeluTanh {
  KJIT_DEVICE static KJIT_FORCEINLINE float apply(float x) {
    // 1 + tanh(z) = 2 / (1 + exp(-2z)), so act(x) = x / (1 + exp(-2z)): exact algebra, and unlike
    // tanh.approx (2^-11 relative) it keeps fp32 accuracy and has no cancellation in either tail.
    const float z = 0.79788456080286535588f * fmaf(0.044715f * x, x * x, x);
    return __fdividef(x, 1.0f + __expf(-2.0f * z));
  }
};

struct Sigmoid {
  KJIT_DEVICE static KJIT_FORCEINLINE float apply(float x) {
    // Silu without the x factor, with the same two MUFU ops and tails: exp(-x) = inf gives 0 for
    // very negative x, exp(-x) = 0 gives 1 for very positive x.
    return __fdividef(1.0f, 1.0f + __expf(-x));
  }
};

// Launch with block (bx, by), bx * by <= kActAndMulThreads, bx threads along a row and by rows
// side by side (for rows shorter than a block); 1 <= grid_x <= ceil(d / VEC / bx) and
// 1 <= grid_y <= 65535. Threads stride over rows by grid_y * by and over a row's vectors by
// grid_x * bx, so every such shape is correct and the host only chooses how work is spread.
// d must be in 1..kActAndMulMaxD and a multiple of VEC; input, out and both row strides must be
// aligned to VEC * sizeof(DTYPE) bytes (then so is the up half, d elements into each row). out must
// not overlap input: input is loaded ahead of other vectors' stores.
// clang-format would read the launch bound as a pointer declaration.
// clang-format off
template <typename DTYPE, typename ACT, int VEC>
__global__ void __launch_bounds__(kActAndMulThreads)
act_and_mul_kernel(const __grid_constant__ ActAndMulParams p) {
  // clang-format on
  pdl_enter();  // before any global access: see prelude.cuh
  static_assert(VEC >= 1 && VEC * sizeof(DTYPE) <= 16, "a vector must fit one 16-byte access");
  using V = Vec<DTYPE, VEC>;
  constexpr int kUnroll = act_and_mul_unroll(int(VEC * sizeof(DTYPE)));

  // With d <= 2^24 and grid_x within its bound, v0 + kUnroll * step stays below 2^28: int
  // vector indices cannot overflow.
  const int n_vec = p.d / VEC;
  const int step = int(gridDim.x * blockDim.x);
  const int first = int(blockIdx.x * blockDim.x + threadIdx.x);
  const i64 row_step = i64(gridDim.y) * blockDim.y;

  for (i64 row = i64(blockIdx.y) * blockDim.y + threadIdx.y; row < p.rows; row += row_step) {
    // 64-bit: rows * stride can exceed 2^31 elements.
    const DTYPE* gate = static_cast<const DTYPE*>(p.input) + row * p.in_stride;
    const DTYPE* up = gate + p.d;
    DTYPE* y = static_cast<DTYPE*>(p.out) + row * p.out_stride;

    for (int v0 = first; v0 < n_vec; v0 += kUnroll * step) {
      V a[kUnroll], b[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int v = v0 + u * step;
        if (u == 0 || v < n_vec) {
          // Plain loads: last-use loads (ld.global.lu) cost 5.5% of the bandwidth at 16384 x
          // 14336 on the H200 (341 -> 323 us, a copy of the same bytes 333 us).
          a[u].load(gate + i64(v) * VEC);
          b[u].load(up + i64(v) * VEC);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int v = v0 + u * step;
        if (u == 0 || v < n_vec) {
          V o;
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            o[e] = from_float<DTYPE>(ACT::apply(to_float(a[u][e])) * to_float(b[u][e]));
          }
          // A 64-bit offset: with an int one the compiler cannot prove the elements contiguous
          // (the 32-bit multiply might wrap) and splits the store into VEC scalar stores.
          o.store(y + i64(v) * VEC);
        }
      }
    }
  }
}

}  // namespace activation
}  // namespace kjit
