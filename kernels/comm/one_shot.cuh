// The one-shot protocol both communication kernels share: epochs, per-block arrival flags across
// ranks, and the staging halves every rank's region holds (layout in comm_params.h).
//
// A call of epoch e (every rank makes the same calls in the same order with the same shapes, so
// the ranks' epochs and grids agree):
//   1. each block copies its share of this rank's input into this rank's staging half e & 1;
//   2. arrive_and_wait: the block's threads 0 .. WORLD - 1 store e into flags[block][rank] of
//      every rank (a release at system scope, so the copy is visible first), then wait until
//      this rank's flags[block][s] >= e for every s (an acquire): every rank's same block has
//      staged its share;
//   3. each block reads that share of every rank's half e & 1 and reduces it;
//   4. the last block to finish advances this rank's epoch for the next call.
// Why no barrier before reuse is needed: a rank writes half e & 1 again at epoch e + 2, after its
// call e + 1 has completed (stream order), and that call completed only once every rank's blocks
// arrived at e + 1, which each rank's stream lets happen only after its call e, and so its reads
// of half e & 1, has completed. A rank may run one call ahead of a slow peer (it then writes the
// other half), never two.
#pragma once

#include "common/prelude.cuh"
#include "comm/comm_params.h"

namespace kjit {
namespace comm {
namespace one_shot {

KJIT_DEVICE KJIT_FORCEINLINE void store_release_sys(u32* p, u32 v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

KJIT_DEVICE KJIT_FORCEINLINE u32 load_acquire_sys(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

KJIT_DEVICE KJIT_FORCEINLINE u32* flags(const CommPeers& p, int rank) {
  return reinterpret_cast<u32*>(p.region[rank]);
}

KJIT_DEVICE KJIT_FORCEINLINE u32* counters(const CommPeers& p) {
  return reinterpret_cast<u32*>(p.region[p.rank] + kCommFlagsBytes);
}

// The epoch of this call (the previous call's, which stream order makes visible, plus one).
KJIT_DEVICE KJIT_FORCEINLINE u32 begin(const CommPeers& p) {
  __shared__ u32 epoch;
  if (threadIdx.x == 0) epoch = *reinterpret_cast<volatile u32*>(counters(p)) + 1;
  __syncthreads();
  return epoch;
}

// Rank `rank`'s staging half of this epoch, as mapped here.
template <typename T>
KJIT_DEVICE KJIT_FORCEINLINE const T* staging(const CommPeers& p, int rank, u32 epoch) {
  return reinterpret_cast<const T*>(p.region[rank] + kCommDataOffset + (epoch & 1) * p.half_bytes);
}
template <typename T>
KJIT_DEVICE KJIT_FORCEINLINE T* own_staging(const CommPeers& p, u32 epoch) {
  return const_cast<T*>(staging<T>(p, p.rank, epoch));
}

// Step 2 above, for this block. Wraps around after 2^32 calls: the comparison is on the signed
// difference.
template <int WORLD>
KJIT_DEVICE KJIT_FORCEINLINE void arrive_and_wait(const CommPeers& p, u32 epoch) {
  __syncthreads();  // the block's copy is done before any thread announces it
  if (int(threadIdx.x) < WORLD) {
    const int peer = int(threadIdx.x);
    store_release_sys(flags(p, peer) + blockIdx.x * kCommMaxRanks + p.rank, epoch);
    const u32* from_peer = flags(p, p.rank) + blockIdx.x * kCommMaxRanks + peer;
    while (int(load_acquire_sys(from_peer) - epoch) < 0) {
    }
  }
  __syncthreads();
}

// Step 4: the last block of the grid stores the epoch (every block read it in begin(), before its
// increment of blocks_done).
KJIT_DEVICE KJIT_FORCEINLINE void finish(const CommPeers& p, u32 epoch) {
  if (threadIdx.x == 0) {
    u32* c = counters(p);
    __threadfence();
    if (atomicAdd(c + 1, 1u) == gridDim.x - 1) {
      c[1] = 0;
      *reinterpret_cast<volatile u32*>(c) = epoch;
    }
  }
}

// out[e] = sum over ranks 0 .. WORLD - 1 (in that order, so every rank gets the same bits) of
// their staged vector at element offset `at`, in fp32.
template <int WORLD, typename V, typename T>
KJIT_DEVICE KJIT_FORCEINLINE void sum_staged(float (&out)[V::kSize], const CommPeers& p, u32 epoch,
                                             long long at) {
  V x[WORLD];
#pragma unroll
  for (int r = 0; r < WORLD; ++r) x[r].load(staging<T>(p, r, epoch) + at);
#pragma unroll
  for (int e = 0; e < V::kSize; ++e) out[e] = to_float(x[0][e]);
#pragma unroll
  for (int r = 1; r < WORLD; ++r) {
#pragma unroll
    for (int e = 0; e < V::kSize; ++e) out[e] += to_float(x[r][e]);
  }
}

}  // namespace one_shot
}  // namespace comm
}  // namespace kjit
