// Block-wide building blocks of the sampling kernels: the row walk (16-byte loads, one warp per
// contiguous segment), reductions and scans over a 1-D block whose size is chosen at launch (a
// multiple of 32, at most 1024), and the order-preserving keys the threshold search works on.
#pragma once

#include "common/prelude.cuh"
#include "common/cluster.cuh"
#include "common/reduce.cuh"
#include "common/vec.cuh"

namespace kjit {
namespace sampling {

constexpr unsigned kFullMask = 0xffffffffu;

// ---- Keys ----------------------------------------------------------------------------------

// A weight w >= 0 (or -0) as an unsigned key with the same order; -0 becomes +0.
KJIT_DEVICE KJIT_FORCEINLINE u32 nonneg_key(float w) {
  return __float_as_uint(w) & 0x7fffffffu;
}
KJIT_DEVICE KJIT_FORCEINLINE float nonneg_value(u32 key) {
  return __uint_as_float(key);
}

// A finite weight's value is significand(key) * binade_unit(key) exactly: keys that share their
// top 9 bits (one binade) share the unit, so integer sums of significands are exact masses.
KJIT_DEVICE KJIT_FORCEINLINE u32 key_significand(u32 key) {
  return (key & 0x7fffffu) | (key >= 0x800000u ? 0x800000u : 0u);
}
// 2^(max(e, 1) - 150) for the key's biased exponent e (subnormals share exponent 1's unit).
KJIT_DEVICE KJIT_FORCEINLINE double binade_unit(u32 key) {
  const int e = int(key >> 23) > 0 ? int(key >> 23) : 1;
  return __longlong_as_double(static_cast<long long>(e - 150 + 1023) << 52);
}

// The float a signed key stands for (signed_key's inverse; -0 comes back as +0).
KJIT_DEVICE KJIT_FORCEINLINE float signed_value(u32 key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// Any float as an unsigned key with the float order (-0 and +0 tie; NaN is the caller's).
KJIT_DEVICE KJIT_FORCEINLINE u32 signed_key(float x) {
  const u32 b = __float_as_uint(x + 0.0f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// exp((x - m) / T) with c = log2(e) / T.
KJIT_DEVICE KJIT_FORCEINLINE float exp_weight(float x, float m, float c) {
  return ex2_approx(__fmul_rn(__fsub_rn(x, m), c));
}

// ---- The row walk -----------------------------------------------------------------------------

// Visits every element of one row. Warp w of the block reads segments of 32 * VEC * U contiguous
// elements (U vector loads per lane, all in flight together); segment s covers elements
// [s * kSeg, (s + 1) * kSeg) and belongs to warp s % warps, so segment numbers follow the index
// order. f(index, value) runs for each element; seg_end(segment) runs on every lane of the warp
// after each of its segments (warp-uniform, so it may use shuffles). Nothing block-wide happens
// inside, so warps run ahead of each other freely. Requires vocab % VEC == 0 and a row aligned to
// VEC * sizeof(T) bytes.
//
// A block of a cluster walks only segments [seg_lo, seg_hi): whole segments, so a segment's
// elements are visited by the same lanes in the same order on every path.
//
// prefetch (a row in global memory): each warp asks L2 for its next segment before visiting the
// current one (prefetch.global.L2, a line per lane, no registers held), so a large batch's passes
// keep about twice the bytes in flight that the 64-register bound allows in loads. Such walks
// also turn direction each time (a zig-zag): at a large batch the rows in flight overflow L2, and
// the segments a walk read last are the likeliest still there, so the next walk starts with them.
// Each warp visits the same segments either way; only fp64 sums see the other order (as they see
// a cluster's split), which the callers allow for.
template <typename T, int VEC, int U>
struct RowWalk {
  static constexpr int kSeg = 32 * VEC * U;
  const T* row;
  int vocab;
  int seg_lo = 0;
  int seg_hi = 0x7fffffff;
  bool prefetch = false;
  mutable bool back = false;  // the next walk runs from the last segment down (prefetch only)

  KJIT_DEVICE KJIT_FORCEINLINE int step() const { return int(blockDim.x) * VEC * U; }

  template <typename F, typename G>
  KJIT_DEVICE KJIT_FORCEINLINE void run(F&& f, G&& seg_end) const {
    const int lane = int(threadIdx.x) & 31;
    const int stride = step();
    const int end = seg_hi < (vocab + kSeg - 1) / kSeg ? seg_hi * kSeg : vocab;
    // The warp's index as a value ptxas knows to be warp-uniform (uniform_int): the loop's bounds
    // are then provably the same in every lane, so the shuffles of seg_end and of the reductions
    // after a walk compile as plain ones instead of behind a divergence check with a collective
    // copy of each. Every caller walks with whole warps.
    const int warp = uniform_int(int(threadIdx.x) >> 5);
    constexpr int kLineElems = 128 / int(sizeof(T));
    const int first = (seg_lo + warp) * kSeg;
    // Down: from the warp's last segment; the loop's test holds base in [first, end) either way.
    // The start and step through uniform_int as well (`back` is per-thread state, though the same
    // in every lane): bounds ptxas cannot prove warp-uniform put the walk's shuffles back behind
    // divergence checks.
    const bool down = prefetch && back && first < end;
    const int step = uniform_int(down ? -stride : stride);
    const int start = uniform_int(down ? first + (end - 1 - first) / stride * stride : first);
    if (prefetch) back = !back;
    for (int base = start; base >= first && base < end; base += step) {
      if (prefetch) {
        const int line = base + step + lane * kLineElems;
        if (lane * kLineElems < kSeg && line >= first && line < end) {
          asm volatile("prefetch.global.L2 [%0];" ::"l"(row + line));
        }
      }
      Vec<T, VEC> v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = base + (u * 32 + lane) * VEC;
        if (i < vocab) v[u].load(row + i);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = base + (u * 32 + lane) * VEC;
        if (i < vocab) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) f(i + e, to_float(v[u][e]));
        }
      }
      seg_end(base / kSeg);
    }
  }

  template <typename F>
  KJIT_DEVICE KJIT_FORCEINLINE void run(F&& f) const {
    run(static_cast<F&&>(f), [](int) {});
  }
};

// ---- Reductions and scans (blockDim.x a multiple of 32, at most 1024) -------------------------

template <typename V>
KJIT_DEVICE KJIT_FORCEINLINE V warp_sum(V v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Every thread gets the block's sum. scratch: 32 elements. Ends on a barrier, so the scratch
// may be reused right away; the order of additions is fixed, so the result is deterministic.
template <typename V>
KJIT_DEVICE KJIT_FORCEINLINE V block_sum(V v, V* scratch) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int warps = int(blockDim.x) >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : V(0);
  v = warp_sum(v);
  __syncthreads();
  return v;
}

// Two block sums at once: the same additions in the same order as two block_sum calls (so the
// same bits), with one pair of barriers and the two shuffle chains interleaved. scratch: 64.
template <typename V>
KJIT_DEVICE KJIT_FORCEINLINE void block_sum2(V& a, V& b, V* scratch) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int warps = int(blockDim.x) >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(kFullMask, a, o);
    b += __shfl_xor_sync(kFullMask, b, o);
  }
  if (lane == 0) {
    scratch[warp] = a;
    scratch[32 + warp] = b;
  }
  __syncthreads();
  a = lane < warps ? scratch[lane] : V(0);
  b = lane < warps ? scratch[32 + lane] : V(0);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(kFullMask, a, o);
    b += __shfl_xor_sync(kFullMask, b, o);
  }
  __syncthreads();
}

KJIT_DEVICE KJIT_FORCEINLINE float block_max(float v, float* scratch) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int warps = int(blockDim.x) >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -__int_as_float(0x7f800000);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  __syncthreads();
  return v;
}

// Pass 0's three block-wide values in one pair of barriers: the sum of s (when SUM; the same
// additions in the same order as block_sum, so the same bits), the maximum of m and the or of
// `any`. Each as its own reduction took five barriers. Scratch: sd, sf and su of 32 elements.
template <bool SUM>
KJIT_DEVICE KJIT_FORCEINLINE void block_sum_max_any(double& s, float& m, bool& any, double* sd,
                                                    float* sf, u32* su) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int warps = int(blockDim.x) >> 5;
  if (SUM) s = warp_sum(s);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, o));
  const bool warp_any = __any_sync(kFullMask, any);
  if (lane == 0) {
    if (SUM) sd[warp] = s;
    sf[warp] = m;
    su[warp] = warp_any ? 1u : 0u;
  }
  __syncthreads();
  if (SUM) s = warp_sum(lane < warps ? sd[lane] : 0.0);
  m = lane < warps ? sf[lane] : -__int_as_float(0x7f800000);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, o));
  any = __any_sync(kFullMask, lane < warps && su[lane] != 0u);
  __syncthreads();
}

KJIT_DEVICE KJIT_FORCEINLINE u64 warp_max_u64(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const u64 other = __shfl_xor_sync(kFullMask, v, o);
    v = other > v ? other : v;
  }
  return v;
}

KJIT_DEVICE KJIT_FORCEINLINE u64 block_max_u64(u64 v, u64* scratch) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int warps = int(blockDim.x) >> 5;
  v = warp_max_u64(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0ull;
  v = warp_max_u64(v);
  __syncthreads();
  return v;
}

// Exclusive prefix of one value per thread in thread order; *total gets the sum. scratch: 32
// elements. Ends on a barrier. Floating-point prefixes of neighbouring threads are each rounded
// on their own, so callers that look for a crossing must tolerate zero or two claimants.
template <typename V>
KJIT_DEVICE KJIT_FORCEINLINE V block_exclusive_scan(V v, V* scratch, V* total) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int warps = int(blockDim.x) >> 5;
  V incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const V n = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += n;
  }
  V excl = __shfl_up_sync(kFullMask, incl, 1);
  if (lane == 0) excl = V(0);
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  V w = lane < warps ? scratch[lane] : V(0);
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const V n = __shfl_up_sync(kFullMask, w, o);
    if (lane >= o) w += n;
  }
  const V before = __shfl_sync(kFullMask, w, warp == 0 ? 0 : warp - 1);
  *total = __shfl_sync(kFullMask, w, 31);
  __syncthreads();
  return warp == 0 ? excl : before + excl;
}

// Two exclusive prefixes at once (a and b, each as block_exclusive_scan would compute it, bit
// for bit), with one pair of barriers and the shuffle chains interleaved. scratch: 64 elements.
template <typename V>
KJIT_DEVICE KJIT_FORCEINLINE void block_exclusive_scan2(V& a, V& b, V* scratch) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int warps = int(blockDim.x) >> 5;
  V ia = a, ib = b;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const V na = __shfl_up_sync(kFullMask, ia, o);
    const V nb = __shfl_up_sync(kFullMask, ib, o);
    if (lane >= o) {
      ia += na;
      ib += nb;
    }
  }
  V ea = __shfl_up_sync(kFullMask, ia, 1);
  V eb = __shfl_up_sync(kFullMask, ib, 1);
  if (lane == 0) {
    ea = V(0);
    eb = V(0);
  }
  if (lane == 31) {
    scratch[warp] = ia;
    scratch[32 + warp] = ib;
  }
  __syncthreads();
  V wa = lane < warps ? scratch[lane] : V(0);
  V wb = lane < warps ? scratch[32 + lane] : V(0);
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const V na = __shfl_up_sync(kFullMask, wa, o);
    const V nb = __shfl_up_sync(kFullMask, wb, o);
    if (lane >= o) {
      wa += na;
      wb += nb;
    }
  }
  const V ba = __shfl_sync(kFullMask, wa, warp == 0 ? 0 : warp - 1);
  const V bb = __shfl_sync(kFullMask, wb, warp == 0 ? 0 : warp - 1);
  __syncthreads();
  a = warp == 0 ? ea : ba + ea;
  b = warp == 0 ? eb : bb + eb;
}

}  // namespace sampling
}  // namespace kjit
