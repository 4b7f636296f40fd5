// Index of the largest element of each row (the first one on ties), as torch.argmax: a NaN
// counts as larger than everything, so a row with NaN returns its first NaN; -0 and +0 tie.
//
// A pure read, so the inner loop must cost about one instruction per element or the SMs, not
// HBM, set the pace (the former loop built a 64-bit (key, index) word per element: ~18
// instructions each, which capped fp32 batch 64 at ~2.1 TB/s). Each thread visits its elements
// in increasing index order, a group of U vectors at a time; per element it does one NaN-keeping
// max. Only when a group's maximum beats the thread's best (by key, strictly) does it search the
// group for the first element equal to that maximum (the first NaN if it is NaN): rare after the
// first groups, and still correct when every group wins (a sorted row). The block then takes the
// maximum of the threads' (key, complement of index) words, which settles ties across threads
// towards the smallest index.
//
// Two launches: argmax_kernel, one block per row (every arch), and on sm_90 argmax_cluster_kernel,
// a cluster of C blocks per row, each scanning a contiguous part of it and storing its word into
// block 0's shared memory, so that small batches still cover every SM.
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

namespace detail {

// max that returns NaN when either input is NaN (fmaxf would drop it).
KJIT_DEVICE KJIT_FORCEINLINE float max_keep_nan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

// The block's best word over row elements [lo, hi): (key << 32) | (2^32 - 1 - index), or 0 when
// the range is empty. Every thread gets it. lo % VEC == 0 and hi % VEC == 0 (or hi == vocab).
template <typename T, int VEC, int U>
KJIT_DEVICE KJIT_FORCEINLINE u64 block_argmax_word(const T* row, int lo, int hi, u64* s_red) {
  constexpr int kSeg = 32 * VEC * U;
  const int lane = int(threadIdx.x) & 31;
  const int stride = int(blockDim.x) * VEC * U;
  u32 best_key = 0;  // below the key of every non-NaN value (key(-inf) = 0x007fffff)
  int best_i = 0;
  for (int base = lo + (int(threadIdx.x) >> 5) * kSeg + lane * VEC; base < hi; base += stride) {
    // base: this lane's first element of the segment; vector u is at base + u * 32 * VEC.
    // Every load is issued before any is used. An out-of-range vector reloads vector 0 (an L1
    // hit, no extra DRAM traffic): the maximum stays, and the search below skips it.
    Vec<T, VEC> v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * 32 * VEC;
      v[u].load(row + (i < hi ? i : base));
    }
    float m = to_float(v[0][0]);
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) m = max_keep_nan(m, to_float(v[u][e]));
    }
    const u32 key = m != m ? 0xffffffffu : signed_key(m);
    if (key > best_key) {
      int idx = base;
#pragma unroll
      for (int u = U - 1; u >= 0; --u) {
#pragma unroll
        for (int e = VEC - 1; e >= 0; --e) {
          const int i = base + u * 32 * VEC + e;
          const float x = to_float(v[u][e]);
          if (i < hi && (x == m || x != x)) idx = i;
        }
      }
      best_key = key;
      best_i = idx;
    }
  }
  const u64 w = best_key == 0 ? 0ull : (u64(best_key) << 32) | u64(0xffffffffu - u32(best_i));
  return block_max_u64(w, s_red);
}

KJIT_DEVICE KJIT_FORCEINLINE void store_index(const ArgmaxParams& p, i64 r, u64 best) {
  const i64 index = i64(0xffffffffu - u32(best & 0xffffffffu));
  if (p.out_i64) {
    static_cast<i64*>(p.out)[r] = index;
  } else {
    static_cast<int*>(p.out)[r] = int(index);
  }
}

}  // namespace detail

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
  const u64 best = detail::block_argmax_word<T, VEC, U>(row, 0, p.vocab, s_red);
  if (threadIdx.x == 0) detail::store_index(p, r, best);
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// Launch: grid = rows * C (C in 2..8, a compile-time cluster of C blocks along x), block and
// alignment as argmax_kernel. Block k of a row scans the k-th of C contiguous parts of it (each a
// multiple of VEC long), so its loads stay 16-byte vectors.
// clang-format off
template <typename T, int VEC, int U, int C>
__global__ void __cluster_dims__(C, 1, 1) __launch_bounds__(1024)
argmax_cluster_kernel(const __grid_constant__ ArgmaxParams p) {
  // clang-format on
  static_assert(C >= 2 && C <= 8, "portable cluster sizes only");
  __shared__ u64 s_red[32];
  __shared__ u64 s_part[C];
  u32 rank, cluster;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm("mov.u32 %0, %%clusterid.x;" : "=r"(cluster));
  // Distributed shared memory may be accessed only once every block of the cluster runs: arrive
  // now, wait after the scan (by then the wait is free).
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  const i64 r = cluster;
  const T* row = static_cast<const T*>(p.input) + r * p.in_stride;
  const int part = ((p.vocab + C - 1) / C + VEC - 1) / VEC * VEC;
  const int lo = min(p.vocab, int(rank) * part);
  const int hi = min(p.vocab, lo + part);
  const u64 best = detail::block_argmax_word<T, VEC, U>(row, lo, hi, s_red);
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
  if (threadIdx.x == 0) {
    // Into s_part[rank] of block 0 (distributed shared memory).
    u32 dst;
    asm volatile("mapa.shared::cluster.u32 %0, %1, 0;"
                 : "=r"(dst)
                 : "r"(u32(__cvta_generic_to_shared(&s_part[rank]))));
    asm volatile("st.shared::cluster.u64 [%0], %1;" ::"r"(dst), "l"(best) : "memory");
  }
  // Release the stores to block 0, which acquires them; no block reads another's shared memory
  // after this, so the others may exit at once.
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (rank == 0 && threadIdx.x < 32) {
    const u64 w = warp_max_u64(threadIdx.x < C ? s_part[threadIdx.x] : 0ull);
    if (threadIdx.x == 0) detail::store_index(p, r, w);
  }
}
#endif

}  // namespace sampling
}  // namespace kjit
