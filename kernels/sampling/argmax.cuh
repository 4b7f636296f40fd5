// Index of the largest element of each row (the first one on ties), as torch.argmax: a NaN
// counts as larger than everything, so a row with NaN returns its first NaN; -0 and +0 tie.
//
// A pure read, so the inner loop must cost about one instruction per element or the SMs, not
// HBM, set the pace (the former loop built a 64-bit (key, index) word per element: ~18
// instructions each, which capped fp32 batch 64 at ~2.1 TB/s). Each thread visits its elements
// in increasing index order, a group of `unroll` vectors at a time; per element it does one
// NaN-keeping max (per pair of elements for 16-bit types). Only when a group's maximum beats the
// thread's best (by key, strictly) does it search the group for the first element equal to that
// maximum (the first NaN if it is NaN): rare after the first groups, and still correct when every
// group wins (a sorted row). The block then takes the maximum of the threads' (key, complement of
// index) words, which settles ties across threads towards the smallest index.
//
// Two launches: argmax_kernel, one block per row (every arch), and on sm_90 argmax_cluster_kernel,
// a cluster of `cluster` blocks per row, each scanning a contiguous part of it and storing its word
// into block 0's shared memory, so that batches below 4 * SMs rows still cover every SM.
//
// Both are held to 32 registers for unroll <= 4 (__launch_bounds__(1024, 2)): at 4 16-byte loads
// per lane and 2048 threads per SM that is 128 KB in flight per SM, what the read-only probe
// keeps, and the host sizes grids in 512-thread blocks, four per SM, so that a split batch runs
// in one wave. unroll = 8 (the scalar path's) gets 64 registers: 1024 threads per SM.
#pragma once

#include "common/prelude.cuh"
#include "common/vec.cuh"
#include "sampling/block.cuh"
#include "sampling/sampling_params.h"

namespace kjit {
namespace sampling {

namespace detail {

// A streaming (evict-first) 16-byte-or-narrower load, as the read-only probe does: every byte
// is read once, so it should not push out of L2 what other kernels will read again.
template <typename T, int VEC>
KJIT_DEVICE KJIT_FORCEINLINE void load_stream(Vec<T, VEC>& v, const T* p) {
  using Raw = typename Vec<T, VEC>::Raw;
  *reinterpret_cast<Raw*>(v.v) = __ldcs(reinterpret_cast<const Raw*>(p));
}

// max that returns NaN when either input is NaN (fmaxf would drop it).
KJIT_DEVICE KJIT_FORCEINLINE float max_keep_nan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

// The NaN-keeping maximum of a group of vectors, as a float. fp32 (and single 16-bit elements):
// one max.NaN.f32 per element. 16-bit pairs stay packed: one max.NaN.{bf16,f16}x2 per two
// elements and no conversion until the end, which also keeps the group's values as the only
// live data (converted copies of 16-bit vectors spilled at 4 loads per lane under 32 registers).
template <typename T, int VEC, bool PAIRS = (sizeof(T) == 2 && VEC >= 2)>
struct GroupMax {
  float m;
  KJIT_DEVICE KJIT_FORCEINLINE void start(const Vec<T, VEC>& v) { m = to_float(v[0]); }
  KJIT_DEVICE KJIT_FORCEINLINE void add(const Vec<T, VEC>& v) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) m = max_keep_nan(m, to_float(v[e]));
  }
  KJIT_DEVICE KJIT_FORCEINLINE float get() const {
    return m;
  }
};

KJIT_DEVICE KJIT_FORCEINLINE u32 max2_keep_nan(__nv_bfloat16*, u32 a, u32 b) {
  u32 d;
  asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
KJIT_DEVICE KJIT_FORCEINLINE u32 max2_keep_nan(__half*, u32 a, u32 b) {
  u32 d;
  asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
KJIT_DEVICE KJIT_FORCEINLINE float low_float(__nv_bfloat16*, u32 w) {
  return __uint_as_float(w << 16);
}
KJIT_DEVICE KJIT_FORCEINLINE float high_float(__nv_bfloat16*, u32 w) {
  return __uint_as_float(w & 0xffff0000u);
}
KJIT_DEVICE KJIT_FORCEINLINE float low_float(__half*, u32 w) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu)));
}
KJIT_DEVICE KJIT_FORCEINLINE float high_float(__half*, u32 w) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
}

template <typename T, int VEC>
struct GroupMax<T, VEC, true> {
  u32 m;
  KJIT_DEVICE KJIT_FORCEINLINE static const u32* words(const Vec<T, VEC>& v) {
    return reinterpret_cast<const u32*>(v.v);
  }
  KJIT_DEVICE KJIT_FORCEINLINE void start(const Vec<T, VEC>& v) { m = words(v)[0]; }
  KJIT_DEVICE KJIT_FORCEINLINE void add(const Vec<T, VEC>& v) {
#pragma unroll
    for (int e = 0; e < VEC / 2; ++e) m = max2_keep_nan(static_cast<T*>(nullptr), m, words(v)[e]);
  }
  KJIT_DEVICE KJIT_FORCEINLINE float get() const {
    return max_keep_nan(low_float(static_cast<T*>(nullptr), m),
                        high_float(static_cast<T*>(nullptr), m));
  }
};

// An element's bits, and the bits a value m (one of the row's elements, as a float) has as a T.
KJIT_DEVICE KJIT_FORCEINLINE u32 elem_bits(float x) {
  return __float_as_uint(x);
}
KJIT_DEVICE KJIT_FORCEINLINE u32 elem_bits(__nv_bfloat16 x) {
  return __bfloat16_as_ushort(x);
}
KJIT_DEVICE KJIT_FORCEINLINE u32 elem_bits(__half x) {
  return __half_as_ushort(x);
}
KJIT_DEVICE KJIT_FORCEINLINE u32 bits_as(float*, float m) {
  return __float_as_uint(m);
}
KJIT_DEVICE KJIT_FORCEINLINE u32 bits_as(__nv_bfloat16*, float m) {
  return __float_as_uint(m) >> 16;  // exact: m came from a bf16
}
KJIT_DEVICE KJIT_FORCEINLINE u32 bits_as(__half*, float m) {
  return __half_as_ushort(__float2half_rn(m));  // exact: m came from a half
}

// The block's best word over row elements [lo, hi): (key << 32) | (2^32 - 1 - index), or 0 when
// the range is empty. Every thread gets it. lo % VEC == 0 and hi % VEC == 0 (or hi == vocab).
//
// A group that beats the thread's best finds its first maximum m by comparing bits when m is
// neither NaN nor zero (~2 instructions per element in SASS): a T that is not NaN and not +-0
// equals m exactly when its bits do; no element is NaN (max.NaN would have returned NaN); and no
// range test is needed, since an out-of-range vector holds a copy of vector 0, so any match in it
// also matches at a lower index in vector 0, which the downward scan picks last. NaN and zero
// maxima (the -0 / +0 tie) take a float compare per element, with a NaN test and a range test
// (~9 instructions per element). The bit compare took fp32 B64 from 10.98 to 10.08 us, bf16 B64
// from 9.73 to 6.66, bf16 B256 from 23.52 to 18.21 (H200, V 128256; 88-94% of the read probe).
template <typename T, int VEC, int U>
KJIT_DEVICE KJIT_FORCEINLINE u64 block_argmax_word(const T* row, int lo, int hi, u64* s_red) {
  constexpr int kSeg = 32 * VEC * U;
  const int lane = int(threadIdx.x) & 31;
  const int stride = int(blockDim.x) * VEC * U;
  u32 best_key = 0;  // below the key of every non-NaN value (key(-inf) = 0x007fffff)
  int best_i = 0;
  for (int base = lo + (int(threadIdx.x) >> 5) * kSeg + lane * VEC; base < hi; base += stride) {
    // base: this lane's first element of the segment; vector u is at base + u * 32 * VEC.
    // Every load is issued before any is used. An out-of-range vector reloads vector 0 (a cache
    // hit, no extra DRAM traffic): the maximum stays, and the search below skips it.
    Vec<T, VEC> v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * 32 * VEC;
      load_stream(v[u], row + (i < hi ? i : base));
    }
    GroupMax<T, VEC> gm;
    gm.start(v[0]);
#pragma unroll
    for (int u = 0; u < U; ++u) gm.add(v[u]);
    const float m = gm.get();
    const u32 key = m != m ? 0xffffffffu : signed_key(m);
    if (key > best_key) {
      int idx = base;
      if (m == m && m != 0.0f) {
        const u32 mb = bits_as(static_cast<T*>(nullptr), m);
#pragma unroll
        for (int u = U - 1; u >= 0; --u) {
#pragma unroll
          for (int e = VEC - 1; e >= 0; --e) {
            if (elem_bits(v[u][e]) == mb) idx = base + u * 32 * VEC + e;
          }
        }
      } else {
#pragma unroll
        for (int u = U - 1; u >= 0; --u) {
#pragma unroll
          for (int e = VEC - 1; e >= 0; --e) {
            const int i = base + u * 32 * VEC + e;
            const float x = to_float(v[u][e]);
            if (i < hi && (x == m || x != x)) idx = i;
          }
        }
      }
      best_key = key;
      best_i = idx;
    }
  }
  const u64 w = best_key == 0 ? 0ull : (u64(best_key) << 32) | u64(0xffffffffu - u32(best_i));
  return block_max_u64(w, s_red);
}

// Blocks of 1024 threads per SM the register budget is sized for: two (32 registers) up to 64
// bytes of loads per lane, one (64) above, where the vectors alone take 32 registers. At 16-byte
// vectors both keep 128 KB in flight per SM (U = 4 or 8).
constexpr int min_blocks(int bytes_per_lane) {
  return bytes_per_lane > 64 ? 1 : 2;
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
// vec == 0 and rows aligned to vec * sizeof(dtype) bytes; vocab < 2^31. The input is read with
// streaming loads, so nothing may write it during the launch (the host rejects overlap).
// clang-format off
template <typename dtype, int vec, int unroll>
__global__ void __launch_bounds__(1024, detail::min_blocks(int(sizeof(dtype)) * vec * unroll))
argmax_kernel(const __grid_constant__ ArgmaxParams p) {
  // clang-format on
  __shared__ u64 s_red[32];
  const i64 r = blockIdx.x;
  const dtype* row = static_cast<const dtype*>(p.input) + r * p.in_stride;
  const u64 best = detail::block_argmax_word<dtype, vec, unroll>(row, 0, p.vocab, s_red);
  if (threadIdx.x == 0) detail::store_index(p, r, best);
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// Launch: grid = rows * cluster (2..8, a compile-time cluster of that many blocks along x), block
// and alignment as argmax_kernel. Block k of a row scans the k-th of `cluster` contiguous parts of
// it (each a multiple of vec long), so its loads stay 16-byte vectors.
// clang-format off
template <typename dtype, int vec, int unroll, int cluster>
__global__ void __cluster_dims__(cluster, 1, 1)
__launch_bounds__(1024, detail::min_blocks(int(sizeof(dtype)) * vec * unroll))
argmax_cluster_kernel(const __grid_constant__ ArgmaxParams p) {
  // clang-format on
  static_assert(cluster >= 2 && cluster <= 8, "portable cluster sizes only");
  __shared__ u64 s_red[32];
  __shared__ u64 s_part[cluster];
  // Read again after the scan rather than kept across it: at 32 registers (four 512-thread
  // blocks per SM) the two live values spilled.
  const auto cta_rank = [] {
    u32 v;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(v));
    return v;
  };
  const auto cluster_id = [] {
    u32 v;
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(v));
    return v;
  };
  // Distributed shared memory may be accessed only once every block of the cluster runs: arrive
  // now, wait after the scan (by then the wait is free).
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  const dtype* row = static_cast<const dtype*>(p.input) + i64(cluster_id()) * p.in_stride;
  const int part = ((p.vocab + cluster - 1) / cluster + vec - 1) / vec * vec;
  const int lo = min(p.vocab, int(cta_rank()) * part);
  const int hi = min(p.vocab, lo + part);
  const u64 best = detail::block_argmax_word<dtype, vec, unroll>(row, lo, hi, s_red);
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
  const u32 rank = cta_rank();
  const i64 r = cluster_id();
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
    const u64 w = warp_max_u64(threadIdx.x < cluster ? s_part[threadIdx.x] : 0ull);
    if (threadIdx.x == 0) detail::store_index(p, r, w);
  }
}
#endif

}  // namespace sampling
}  // namespace kjit
