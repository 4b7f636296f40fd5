// Index of the largest element of each row (the first one on ties), as torch.argmax: a NaN
// counts as larger than everything, so a row with NaN returns its first NaN.
//
// A pure read: each element becomes one 64-bit word (order-preserving key of the value above,
// the complement of the index below) and the block takes the maximum word, which settles ties
// towards the smallest index without a second comparison.
#pragma once

#include "common/prelude.cuh"
#include "common/vec.cuh"
#include "sampling/block.cuh"

namespace kjit {
namespace sampling {

// Passed by value as a __grid_constant__ kernel parameter. Keep this exact layout: the host
// mirrors it.
struct ArgmaxParams {
  const void* input;  // [rows, vocab], row stride in_stride
  void* out;          // [rows] int32 or int64
  long long rows;
  long long in_stride;
  int vocab;
  int out_i64;
};

// Launch: grid = rows, block = a multiple of 32 up to 1024, no dynamic shared memory. vocab %
// VEC == 0 and rows aligned to VEC * sizeof(T) bytes; vocab < 2^31.
// clang-format off
template <typename T, int VEC, int U>
__global__ void __launch_bounds__(1024)
argmax_kernel(const __grid_constant__ ArgmaxParams p) {
  // clang-format on
  __shared__ u64 s_red[32];
  const i64 r = blockIdx.x;
  const T* row = static_cast<const T*>(p.input) + r * p.in_stride;
  u64 best = 0;
  const RowWalk<T, VEC, U> walk{row, p.vocab};
  walk.run([&](int i, float x) {
    const u32 key = x != x ? 0xffffffffu : signed_key(x);
    const u64 w = (u64(key) << 32) | u64(0xffffffffu - u32(i));
    best = w > best ? w : best;
  });
  best = block_max_u64(best, s_red);
  if (threadIdx.x == 0) {
    const i64 index = i64(0xffffffffu - u32(best & 0xffffffffu));
    if (p.out_i64) {
      static_cast<i64*>(p.out)[r] = index;
    } else {
      static_cast<int*>(p.out)[r] = int(index);
    }
  }
}

}  // namespace sampling
}  // namespace kjit
