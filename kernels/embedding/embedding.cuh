// Token-embedding gather: out[t, :] = table[ids[t], :], the first op of a decoder's forward pass.
// A row whose id is outside [0, vocab) is written as zeros: the ids live on the device (a
// sampler wrote them, a CUDA graph replays them), so the host cannot check them, and the kernel
// must never read outside the table.
//
// A pure copy: each thread moves 16-byte (or narrower, as the alignment allows) vectors, and the
// id is read once per row by every thread of the row (one cached 4- or 8-byte load).
#pragma once

#include "common/prelude.cuh"
#include "common/vec.cuh"
#include "embedding/embedding_params.h"

namespace kjit {
namespace embedding {

// Launch with block (bx, by), bx * by <= kEmbeddingThreads: bx threads along a row, by rows side
// by side; any grid_x >= 1 and 1 <= grid_y <= 65535 (threads stride over rows by grid_y * by and
// over a row's vectors by grid_x * bx, so every shape is correct). hidden must be a multiple of
// VEC, and table, out and both row strides aligned to VEC * sizeof(DTYPE) bytes. out must not
// overlap table or ids.
// clang-format would read the launch bound as a pointer declaration.
// clang-format off
template <typename DTYPE, typename INDEX, int VEC>
__global__ void __launch_bounds__(kEmbeddingThreads)
embedding_kernel(const __grid_constant__ EmbeddingParams p) {
  // clang-format on
  pdl_enter();  // before any global access: see prelude.cuh
  static_assert(VEC >= 1 && VEC * sizeof(DTYPE) <= 16, "a vector must fit one 16-byte access");
  using V = Vec<DTYPE, VEC>;
  const int n_vec = p.hidden / VEC;
  const int step = int(gridDim.x * blockDim.x);
  const int first = int(blockIdx.x * blockDim.x + threadIdx.x);
  const i64 row_step = i64(gridDim.y) * blockDim.y;

  for (i64 row = i64(blockIdx.y) * blockDim.y + threadIdx.y; row < p.tokens; row += row_step) {
    const i64 id = i64(static_cast<const INDEX*>(p.ids)[row]);
    const bool valid = id >= 0 && id < p.vocab;
    // 64-bit offsets: id * stride can exceed 2^31 elements (a 128k x 8k table has 2^30).
    const DTYPE* src = static_cast<const DTYPE*>(p.table) + (valid ? id : 0) * p.table_stride;
    DTYPE* dst = static_cast<DTYPE*>(p.out) + row * p.out_stride;
    for (int v = first; v < n_vec; v += step) {
      V x;
      if (valid) {
        x.load(src + i64(v) * VEC);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) x[e] = from_float<DTYPE>(0.0f);
      }
      x.store(dst + i64(v) * VEC);
    }
  }
}

}  // namespace embedding
}  // namespace kjit
