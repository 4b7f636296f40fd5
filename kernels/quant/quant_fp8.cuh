// Dynamic fp8 (e4m3) quantization: scale = amax / 448 per tensor, row or 1 x 128 group, out =
// e4m3(x / scale) rounded to nearest even and saturated (common/fp8.cuh). A zero scale (all
// zeros) writes zeros. The division is IEEE (NVRTC's default), so the result is exactly the CPU
// reference's.
//
// Launch contracts (kQuantThreads threads, no dynamic shared memory):
//   per tensor: p.scale zeroed first (a memset on the stream), then quant_fp8_amax_kernel and
//     quant_fp8_tensor_kernel with the same grid of up to `rows` blocks (each walks rows
//     blockIdx.x, + gridDim.x, ...). The amax kernel leaves max over blocks of (block amax / 448)
//     in *p.scale through an integer atomicMax: non-negative floats order as their bits do, and
//     x -> x / 448 is monotonic, so that is the tensor's amax / 448.
//   per row: one block per row.
//   per group: one warp per group, kQuantThreads / 32 groups per block, ceil(rows * groups / 8)
//     blocks.
#pragma once

#include "common/fp8.cuh"
#include "common/prelude.cuh"
#include "quant/quant_params.h"

namespace kjit {
namespace quant {

KJIT_DEVICE KJIT_FORCEINLINE float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Max over the block; every thread gets it. Every thread must reach it.
KJIT_DEVICE KJIT_FORCEINLINE float block_max(float v) {
  __shared__ float partial[kQuantThreads / 32];
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x % 32 < kQuantThreads / 32 ? partial[threadIdx.x % 32] : 0.0f;
  return warp_max(v);
}

// Where a lane of a one-warp-per-group kernel stands: its group (of rows * groups, row-major,
// the scales' index), the group's row and the lane's first column (then every 32nd). False past
// the last group: whole warps leave together, so the shuffles of the others stay full.
struct GroupLane {
  i64 group, row, col0;
};
KJIT_DEVICE KJIT_FORCEINLINE bool group_lane(long long rows, long long groups, GroupLane& g) {
  g.group = i64(blockIdx.x) * (kQuantThreads / 32) + threadIdx.x / 32;
  if (g.group >= rows * groups) return false;
  g.row = g.group / groups;
  g.col0 = (g.group % groups) * kQuantGroup + threadIdx.x % 32;
  return true;
}

template <typename IN>
KJIT_DEVICE KJIT_FORCEINLINE float load_abs(const QuantFp8Params& p, i64 row, i64 col) {
  return fabsf(to_float(static_cast<const IN*>(p.in)[row * p.in_stride + col]));
}

template <typename IN>
KJIT_DEVICE KJIT_FORCEINLINE void store_quantized(const QuantFp8Params& p, i64 row, i64 col,
                                                  float scale) {
  const float x = to_float(static_cast<const IN*>(p.in)[row * p.in_stride + col]);
  static_cast<u8*>(p.out)[row * p.out_stride + col] = e4m3_bits(scale > 0.0f ? x / scale : 0.0f);
}

template <typename IN>
__global__ void __launch_bounds__(kQuantThreads)
    quant_fp8_amax_kernel(const __grid_constant__ QuantFp8Params p) {
  float m = 0.0f;
  for (i64 r = blockIdx.x; r < p.rows; r += gridDim.x) {
    for (i64 c = threadIdx.x; c < p.cols; c += kQuantThreads) m = fmaxf(m, load_abs<IN>(p, r, c));
  }
  m = block_max(m);
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(p.scale), __float_as_int(m / kE4M3Max));
}

template <typename IN>
__global__ void __launch_bounds__(kQuantThreads)
    quant_fp8_tensor_kernel(const __grid_constant__ QuantFp8Params p) {
  const float scale = *p.scale;
  for (i64 r = blockIdx.x; r < p.rows; r += gridDim.x) {
    for (i64 c = threadIdx.x; c < p.cols; c += kQuantThreads) store_quantized<IN>(p, r, c, scale);
  }
}

template <typename IN>
__global__ void __launch_bounds__(kQuantThreads)
    quant_fp8_row_kernel(const __grid_constant__ QuantFp8Params p) {
  const i64 r = blockIdx.x;
  float m = 0.0f;
  for (i64 c = threadIdx.x; c < p.cols; c += kQuantThreads) m = fmaxf(m, load_abs<IN>(p, r, c));
  const float scale = block_max(m) / kE4M3Max;
  if (threadIdx.x == 0) p.scale[r] = scale;
  for (i64 c = threadIdx.x; c < p.cols; c += kQuantThreads) store_quantized<IN>(p, r, c, scale);
}

template <typename IN>
__global__ void __launch_bounds__(kQuantThreads)
    quant_fp8_group_kernel(const __grid_constant__ QuantFp8Params p) {
  constexpr int kPerLane = kQuantGroup / 32;
  GroupLane g;
  if (!group_lane(p.rows, p.groups, g)) return;
  const i64 r = g.row, c0 = g.col0;
  float m = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    if (c0 + 32 * j < p.cols) m = fmaxf(m, load_abs<IN>(p, r, c0 + 32 * j));
  }
  const float scale = warp_max(m) / kE4M3Max;
  if (threadIdx.x % 32 == 0) p.scale[g.group] = scale;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    if (c0 + 32 * j < p.cols) store_quantized<IN>(p, r, c0 + 32 * j, scale);
  }
}

}  // namespace quant
}  // namespace kjit
