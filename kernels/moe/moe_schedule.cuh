// The grouped GEMM's tile schedule (kernels/moe/moe_params.h), read off the expert offsets or
// counts on the device so that a graph replays with new routing: every expert's rows split into
// ceil(rows / TILE_M) row tiles, experts in id order; row tile i of the grid is the i-th of that
// list, and a block past its end has nothing to do.
#pragma once

#include "common/prelude.cuh"
#include "moe/moe_params.h"

namespace kjit {
namespace moe {

// Expert e's rows [first, end) of the whole a / out, clamped into them (the offsets and counts
// are device data the host cannot check).
KJIT_DEVICE KJIT_FORCEINLINE void expert_rows(const MoeGemmParams& p, int e, i64& first, i64& end) {
  if (p.offsets != nullptr) {
    first = min(max(i64(p.offsets[e]), i64(0)), p.g.m);
    end = min(max(i64(p.offsets[e + 1]), first), p.g.m);
  } else {
    first = i64(e) * p.rows_per_expert;
    end = first + min(max(i64(p.counts[e]), i64(0)), p.rows_per_expert);
  }
}

// One block tile's place in the schedule; expert -1: past its end.
struct GroupTile {
  i64 row0, row_end;  // the tile's first row and its expert's end (rows of the whole a / out)
  int expert;
  bool lone;  // the expert's only row tile: its column tiles all re-read these rows of a
};

// Row tile `tile` of the schedule. All 32 lanes of one warp call it; every lane gets the answer.
template <int TILE_M>
KJIT_DEVICE KJIT_FORCEINLINE GroupTile find_tile(const MoeGemmParams& p, int tile) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  int before = 0;  // tiles of the experts of earlier chunks
  for (int e0 = 0; e0 < p.experts; e0 += 32) {
    i64 first = 0, end = 0;
    if (e0 + lane < p.experts) expert_rows(p, e0 + lane, first, end);
    const int tiles = static_cast<int>((end - first + TILE_M - 1) / TILE_M);
    int incl = tiles;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int o = __shfl_up_sync(0xffffffffu, incl, offset);
      if (lane >= offset) incl += o;
    }
    const int total = __shfl_sync(0xffffffffu, incl, 31);
    if (tile < before + total) {
      const int l = __ffs(__ballot_sync(0xffffffffu, tile < before + incl)) - 1;
      const int skipped = __shfl_sync(0xffffffffu, incl - tiles, l);
      GroupTile g;
      g.expert = e0 + l;
      g.row0 = __shfl_sync(0xffffffffu, first, l) + i64(tile - before - skipped) * TILE_M;
      g.row_end = __shfl_sync(0xffffffffu, end, l);
      g.lone = __shfl_sync(0xffffffffu, end - first, l) <= TILE_M;
      return g;
    }
    before += total;
  }
  return GroupTile{0, 0, -1};
}

// find_tile by the block's first warp, shared with the block (every thread calls it).
template <int TILE_M>
KJIT_DEVICE KJIT_FORCEINLINE GroupTile block_tile(const MoeGemmParams& p, int tile) {
  __shared__ GroupTile shared_tile;
  if (threadIdx.x < 32) {
    const GroupTile g = find_tile<TILE_M>(p, tile);
    if (threadIdx.x == 0) shared_tile = g;
  }
  __syncthreads();
  return shared_tile;
}

// The block's view of its expert: a, b and out moved to the tile's expert and first row (m: the
// rows left in the expert from there, so the tile masks at the expert's end).
KJIT_DEVICE KJIT_FORCEINLINE gemm::GemmParams expert_view(const MoeGemmParams& p,
                                                          const GroupTile& t, int elem_bytes,
                                                          int out_bytes) {
  gemm::GemmParams q = p.g;
  q.a = static_cast<const char*>(p.g.a) + t.row0 * p.g.a_stride * elem_bytes;
  q.b = static_cast<const char*>(p.g.b) + i64(t.expert) * p.g.n * p.g.b_stride * elem_bytes;
  q.out = static_cast<char*>(p.g.out) + t.row0 * p.g.out_stride * out_bytes;
  q.m = t.row_end - t.row0;
  return q;
}

}  // namespace moe
}  // namespace kjit
