// Sorting-free top-k / top-p / min-p filtering with sampling, renormalization or masking.
//
// One block per row, or (sampling on sm_90+, small batches) one thread-block cluster per row:
// each block of the cluster walks a contiguous share of the row's segments, and every point where
// the one-block kernel reduces over its block (a histogram level, a sum, the maximum) is combined
// over the cluster through distributed shared memory, with integer histograms and fp64 sums, so
// both paths find the same thresholds and draw the same token. Every element has a weight w >= 0
// (the probability, or exp((x - max) / T) for logits) and unsigned keys with the weight's order
// (the bits of w) and, for logits, the logit's order (top-k ranks logits by the logit: exact, and
// its passes need no exp). Each filter keeps the tokens whose key is at least a threshold, so ties
// at the boundary are always admitted together:
//   top-k:  keys >= the k-th largest key (counting repeats);
//   top-p:  keys >= the largest K with mass(keys >= K) >= p * mass, i.e. a token is kept when
//           the mass strictly above it is < p * mass. With top-k too, "mass" is the top-k set's
//           mass (top-k first, as vLLM and FlashInfer's top_k_first);
//   min-p:  w >= fl(min_p * w_max).
// The row keeps the tokens at or above the largest of the thresholds.
//
// Thresholds are found by a radix search over the keys, without sorting: a pass counts the
// keys of the current window into 2048 bins in shared memory (an increment is one hardware-
// aggregated atomic), a block scan from the top finds the bin holding the threshold, and the
// next pass refines that bin (11 + 11 + 9 bits for top-k, at most three passes). Top-p also needs
// each bin's mass: bounds from the bin's edges (count x the smallest / largest value the bin can
// hold) and, from the second level on, the sum of w in 24-bit fixed point relative to the
// window's top (integer atomics, so deterministic); once a window is a single key its mass is
// exact (count x value). A window shrinks to the bins whose bounds straddle p * mass, usually one.
// The exact-mass variant (mass = 1) sums significands per bin instead, which are exact masses
// within a binade (see filter_kernel). On a cluster, once the first level has narrowed the search
// to a few thousand keys, the blocks send those keys to the leader (list modes: the exact-mass
// top-p window, and a top-k row's candidates when they are few, which the leader finishes by
// ranking), so the later levels need no cluster barriers, merges or redundant searches. One
// block a row ranks a top-k row's few candidates too, collected in one pass.
//
// Sampling then draws one uniform u (Philox, seed / offset from device memory) and inverts the
// CDF of the kept weights in index order, in integers (fixed_weight: each weight in units of
// 2^-31 of the row's largest): one pass sums kept weight per 32 * VEC * U-element segment, a
// block scan picks the segment, one warp rescans it. One block a row running the exact top-p
// list begins those sums in the list's pass instead (the keys above the list's window are kept
// whatever the threshold) and adds the listed keys the threshold keeps afterwards, so the top-p
// sampler reads the row twice (pass 0, the list's) plus one segment. Integer sums do not depend
// on their order, so every path and block size draws the same token. Nothing is sorted, nothing
// is rejected and retried, the work per row is bounded (at most 2 + 2 + 9 + 1 passes over the
// row, typically 2 to 7), and a fixed seed and offset give the same token on every run.
//
// A row is invalid when it holds a NaN, an infinite or (probabilities) negative value, when its
// mass is zero, or when its per-row parameter is out of range; see SamplingParams.
#pragma once

#include "common/prelude.cuh"
#include "common/vec.cuh"
#include "sampling/block.cuh"
#include "sampling/philox.cuh"
#include "sampling/radix.cuh"
#include "sampling/sampling_params.h"

namespace kjit {
namespace sampling {

// The `input` and `op` settings of filter_kernel (the host's FilterInput and FilterOp).
enum : int { kInputProbs = 0, kInputLogits = 1, kInputLogitKeys = 2 };
enum : int { kOpSample = 0, kOpRenorm = 1, kOpMask = 2 };

constexpr int kMaxSegments = 1024;  // vocab <= 262144 with segments of >= 256 elements
constexpr int kMaxTopPLevels = 9;
// Threads per block of the cluster path: at 512 its kernels need no local memory (under a
// 1024-thread bound, i.e. 64 registers, the sm_90a cluster kernels spilled 5-64 values).
constexpr int kClusterMaxThreads = 512;

namespace detail {

// The window of the top-p search: keys [lo, hi] in bins of 2^s keys, with the exact mass of
// the keys > hi (`above`) and, when have_mass, each bin's fixed-point mass.
struct Window {
  u32 lo, hi;
  int s;
  u32 kmax;  // the row's largest key: no bin holds a larger one
  bool have_mass;
  float scale;  // fixed-point units per unit of weight
  double above;
  // The whole key range in 2^20-key bins, no bin masses, nothing above: pass 0's histogram as
  // the first level (kmax is the row's and stays).
  KJIT_DEVICE KJIT_FORCEINLINE void whole() {
    lo = 0;
    hi = 0x7fffffffu;
    s = 20;
    have_mass = false;
    scale = 0.0f;
    above = 0.0;
  }
};

// Lower and upper bounds of bin b's mass.
KJIT_DEVICE KJIT_FORCEINLINE void bin_bounds(const u32* cnt, const u32* mhi, const u32* mlo,
                                             const Window& w, int b, double& lo, double& hi) {
  const u32 c = cnt[b];
  if (c == 0) {
    lo = hi = 0.0;
    return;
  }
  const u32 k_lo = w.lo + (u32(b) << w.s);
  const u32 span = (u32(1) << w.s) - 1;  // the bin's last key, capped by the window's
  u32 k_hi = w.hi - k_lo < span ? w.hi : k_lo + span;
  k_hi = k_hi < w.kmax ? k_hi : w.kmax;
  lo = double(c) * double(nonneg_value(k_lo));
  hi = double(c) * double(nonneg_value(k_hi));
  if (w.have_mass && w.s > 0) {
    // Each element added floor(rz(w * scale)), which is within [w * scale - 2, w * scale].
    const double q = double(mhi[b]) * 4096.0 + double(mlo[b]);
    const double sc = double(w.scale);
    const double mlo_b = q / sc, mhi_b = (q + 2.0 * double(c)) / sc;
    lo = lo > mlo_b ? lo : mlo_b;
    hi = hi < mhi_b ? hi : mhi_b;
  }
}

// Adds key's significand to bin b's two half sums (see exact_bin_mass): native u32 reductions
// on the arrays' shared-window addresses (smem_addr, taken once outside the row walk: through a
// generic pointer each add re-derived the block's window in pass 0's loop), unconditional (a
// zero half is rare, and the branch around it cost more than the add).
KJIT_DEVICE KJIT_FORCEINLINE void add_significand(u32 shi, u32 slo, int b, u32 key) {
  const u32 m = key_significand(key);
  asm volatile("red.shared.add.u32 [%0], %1;" ::"r"(shi + 4u * u32(b)), "r"(m >> 12) : "memory");
  asm volatile("red.shared.add.u32 [%0], %1;" ::"r"(slo + 4u * u32(b)), "r"(m & 4095u) : "memory");
}

// Bin b's exact mass from its sum of significands, for windows whose bins each lie in one binade
// (the first level's 2^20-key bins, and every window inside one of them). The sum is kept as two
// u32 sums of the significands' 12-bit halves (add_significand): shared memory has no 64-bit
// atomic add (a u64 atomicAdd compiles to a compare-and-swap loop, which spins on the hot bins),
// and each half sums exactly for up to 2^20 keys. Their combination is a u64 below 2^42, and the
// unit a power of two, so the product is exact in fp64.
KJIT_DEVICE KJIT_FORCEINLINE double exact_bin_mass(const u32* shi, const u32* slo, const Window& w,
                                                   int b) {
  const u64 m = (u64(shi[b]) << 12) + u64(slo[b]);
  return m == 0ull ? 0.0 : double(m) * binade_unit(w.lo + (u32(b) << w.s));
}

// The bins that may hold the top-p threshold: b1 is the largest b whose upper bound of the mass
// at or above it reaches target (the threshold is below the end of b1), b0 the largest b whose
// lower bound does (the threshold is at or above the start of b0; -1: no bin is sure). Prefixes
// of neighbouring threads round separately, so a crossing may be claimed twice or missed; each
// side then takes the looser answer, which only widens the next window. scratch: 64 elements.
// EXACT: the bins' masses are exact (exact_bin_mass over mhi and mlo), so both bounds are the mass
// and b0 == b1 unless nothing reaches the target. UNIFORM: see the walks below.
template <bool EXACT, bool UNIFORM>
KJIT_DEVICE void find_mass_bins(const u32* cnt, const u32* mhi, const u32* mlo, const Window& w,
                                int nb, double target, double* scratch, int* found, int& b0,
                                int& b1) {
  auto bounds = [&](int b, double& lo, double& hi) {
    if constexpr (EXACT) {
      lo = hi = exact_bin_mass(mhi, mlo, w, b);
    } else {
      bin_bounds(cnt, mhi, mlo, w, b, lo, hi);
    }
  };
  if (threadIdx.x == 0) {
    found[0] = -1;          // b1: atomicMax
    found[1] = 0x7fffffff;  // b0: atomicMin
  }
  const int per = (nb + int(blockDim.x) - 1) / int(blockDim.x);
  const int r0 = int(threadIdx.x) * per;
  const int r1 = r0 + per < nb ? r0 + per : nb;
  // Two walks over the thread's bins, the thread's sums then (after the block scan) the
  // crossings; one loop runs both so that `bounds` (fp64 divisions) is in the kernel once.
  // UNIFORM (the cluster kernel): the inner loop runs the block's largest count in every lane (a
  // lane past its bins skips), a count ptxas sees as warp-uniform (uniform_int), so the scans
  // between the walks compile as plain shuffles rather than behind a divergence check with a
  // collective copy of each: less code and NVRTC time. The one-block kernel keeps the plain
  // loop: with the uniform one its counting top-k + top-p ran 8% slower (H100, B128 fp32
  // logits, 86.7 -> 93.6-94.1 us, the same call).
  const int count = UNIFORM ? uniform_int(per) : 0;
  double run_lo = 0.0, run_hi = 0.0;
  auto visit = [&](int r, int walk) {
    const int b = nb - 1 - r;
    double lo, hi;
    bounds(b, lo, hi);
    const double next_lo = run_lo + lo, next_hi = run_hi + hi;
    if (walk == 1) {
      if (run_hi < target && next_hi >= target) atomicMax(&found[0], b);
      if (run_lo < target && next_lo >= target) atomicMin(&found[1], b);
    }
    run_lo = next_lo;
    run_hi = next_hi;
  };
#pragma unroll 1
  for (int walk = 0; walk < 2; ++walk) {
    if constexpr (UNIFORM) {
      for (int k = 0; k < count; ++k) {
        if (r0 + k < r1) visit(r0 + k, walk);
      }
    } else {
      for (int r = r0; r < r1; ++r) visit(r, walk);
    }
    if (walk == 1) break;
    if constexpr (EXACT) {
      // The two bounds are one value: one scan (half the shuffles of the pair).
      double total;
      run_lo = block_exclusive_scan<double>(run_lo, scratch, &total);
      run_hi = run_lo;
    } else {
      block_exclusive_scan2<double>(run_lo, run_hi, scratch);
    }
    run_lo = w.above + run_lo;
    run_hi = w.above + run_hi;
  }
  __syncthreads();
  b1 = found[0] < 0 ? nb - 1 : found[0];
  b0 = found[1] == 0x7fffffff ? -1 : found[1];
  __syncthreads();
}

// ---- The draw's fixed-point weights ----
// The draw inverts the CDF of the kept weights in integers: each kept weight w counts as
// q(w) = floor(w * 2^(31 - e)), e = floor(log2(w_max)) of the row's largest weight, so q < 2^32
// and a row's sum < 2^50 fits a u64. Integer sums do not depend on their order: a segment's mass
// is the same whether one warp sums it in a pass over the row, or (one block, exact top-p) the
// pass that collects the top-p list sums the keys above the window and the listed keys are added
// later by atomics, or a cluster's blocks each sum their share; every path draws the same token.
// A weight under 2^-31 of w_max counts as 0 (never drawn; at most 2^-13 of the mass in all at
// the largest vocabulary), and the CDF's unit is 2^-31 of w_max, finer than the fp32 weights.
struct FixedScale {
  float hi, lo;  // q(w) = floor((w * hi) * lo): powers of two, each product exact
};
// The scale for a row whose largest weight has key kmax (> 0). 2^(31 - e) is one float power of
// two unless e < -96 (tiny rows): then hi = 2^127 and lo the rest, and w * hi is still exact
// (w <= w_max < 2^-96 keeps it under 2^31).
KJIT_DEVICE KJIT_FORCEINLINE FixedScale fixed_scale(u32 kmax) {
  const int e = kmax >= 0x800000u ? int(kmax >> 23) - 127 : (31 - __clz(int(kmax))) - 149;
  const int n = 31 - e;  // in [-96, 180]
  const int nh = n < 127 ? n : 127;
  return {__uint_as_float(u32(nh + 127) << 23), __uint_as_float(u32(n - nh + 127) << 23)};
}
KJIT_DEVICE KJIT_FORCEINLINE u32 fixed_weight(float w, FixedScale c) {
  return __float2uint_rz(__fmul_rn(__fmul_rn(w, c.hi), c.lo));
}
// Adds q to the u64 at a (shared memory) from many threads: a u32 atomic on the low word and the
// carry into the high word (a u64 atomic add on shared memory is a compare-and-swap loop). The
// total is exact once every thread has added.
KJIT_DEVICE KJIT_FORCEINLINE void atomic_add_u64_shared(u64* a, u32 q) {
  u32* const w = reinterpret_cast<u32*>(a);  // little-endian: w[0] low, w[1] high
  const u32 old = atomicAdd(&w[0], q);
  if (old + q < old) atomicAdd(&w[1], 1u);
}

// One row's result: the token (-1 for an invalid row) and its valid flag.
KJIT_DEVICE KJIT_FORCEINLINE void write_sample(const SamplingParams& p, i64 r, i64 token) {
  if (p.samples_i64) {
    static_cast<i64*>(p.samples)[r] = token;
  } else {
    static_cast<int*>(p.samples)[r] = static_cast<int>(token);
  }
  if (p.valid) p.valid[r] = token >= 0 ? 1 : 0;
}

template <typename T, int VEC, int U, typename F>
KJIT_DEVICE KJIT_FORCEINLINE void write_row(const T* in, T* out, int vocab, F&& value) {
  constexpr int kSeg = 32 * VEC * U;
  const int lane = int(threadIdx.x) & 31;
  const int stride = int(blockDim.x) * VEC * U;
  for (int base = (int(threadIdx.x) >> 5) * kSeg; base < vocab; base += stride) {
    Vec<T, VEC> v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + (u * 32 + lane) * VEC;
      if (i < vocab) v[u].load(in + i);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + (u * 32 + lane) * VEC;
      if (i < vocab) {
        Vec<T, VEC> o;
#pragma unroll
        for (int e = 0; e < VEC; ++e) o[e] = from_float<T>(value(to_float(v[u][e])));
        o.store(out + i);
      }
    }
  }
}

// ---- The cluster path: one row over the blocks of a thread-block cluster (sm_90+) ----

// Block-wide values combined over the cluster: sums, a maximum, an or and a u64 maximum.
struct ClusterRed {
  double s0, s1;
  float m;
  u32 flag;
  u64 best;
};

// Every block of the cluster gets the same combination (ranks are added in rank order), so the
// decisions each block takes on it agree. `slots` alternates between two buffers: a block writes
// slot k % 2 only after the barrier of exchange k - 1, which every block passes only after
// reading slot (k - 2) % 2, so one barrier per exchange suffices. Thread q fetches block q's slot
// into `staged` ([kMaxCluster]), so each block makes n remote reads, not n per thread.
//
// An exchange is a publish, one cluster barrier, then a gather; any cluster barrier between the
// two serves (a histogram merge's, which saves a barrier per level), provided the gather comes
// before the next publish's barrier.
constexpr int kMaxCluster = 16;
KJIT_DEVICE KJIT_FORCEINLINE void cluster_publish(const ClusterRed& v, ClusterRed* slots,
                                                  int parity) {
  if (threadIdx.x == 0) slots[parity] = v;
}

KJIT_DEVICE void cluster_gather(ClusterRed& v, ClusterRed* slots, ClusterRed* staged, int& parity) {
  const u32 n = cluster_size();
  if (threadIdx.x < n) staged[threadIdx.x] = cluster_map(slots, threadIdx.x)[parity];
  __syncthreads();
  ClusterRed acc;
  acc.s0 = 0.0;
  acc.s1 = 0.0;
  acc.m = -__int_as_float(0x7f800000);
  acc.flag = 0u;
  acc.best = 0ull;
  // Rolled: the sums are one dependent chain anyway, and the exchange is inlined at every
  // phase that ends on one, where an unrolled copy cost NVRTC time for nothing.
#pragma unroll 1
  for (u32 q = 0; q < n; ++q) {
    const ClusterRed o = staged[q];
    acc.s0 += o.s0;
    acc.s1 += o.s1;
    acc.m = fmaxf(acc.m, o.m);
    acc.flag |= o.flag;
    acc.best = o.best > acc.best ? o.best : acc.best;
  }
  __syncthreads();  // `staged` is reused by the next exchange
  parity ^= 1;
  v = acc;
}

KJIT_DEVICE void cluster_exchange(ClusterRed& v, ClusterRed* slots, ClusterRed* staged,
                                  int& parity) {
  cluster_publish(v, slots, parity);
  cluster_sync();
  cluster_gather(v, slots, staged, parity);
}

constexpr int kOwnBins = kBins / 2;  // clusters of >= 2 blocks
// List mode (see filter_kernel): a block collects at most kListLocal keys (in its s_cnt), the
// leader's list holds at most kListCap (in its s_own).
constexpr u32 kListLocal = kBins;
static_assert(kListLocal == u32(kListStaticKeys), "the host sizes list_cap against kListLocal");
constexpr u32 kListCap = 3 * kOwnBins;
// The fused exact top-p list's entries (FilterRow::seg_fused): the key's offset in the window in
// the low kListKeyBits bits (the window is one first-level bin: 2^20 keys), the segment above.
constexpr int kListKeyBits = 20;
constexpr u32 kListKeyMask = (1u << kListKeyBits) - 1u;
static_assert(kMaxSegments <= (1 << (32 - kListKeyBits)), "a segment number fits the entry");
// A top-k list of at most kRankCap keys is finished by ranking (see rank_finish).
constexpr u32 kRankCap = 512;

// Replaces bins [0, nb) of the first narr (1..3) u32 arrays of (a0, a1, a2) by their sums over
// the cluster, in two steps through `own` ([3][kOwnBins] words): block q sums its share of the
// bins from every block, then every block gathers the shares. Each block moves about 2 * nb words
// per array instead of (cluster size) * nb. Integer sums, so the order of additions does not
// matter. Every access is a 16-byte quad of bins: distributed shared memory costs per request far
// more than per byte (one 4-byte request per bin made this merge the largest fixed cost of a level
// at batch 1), so the arrays and `own` must be 16-byte aligned. Bins [nb, 4 * ceil(nb / 4)) ride
// along; they are zero in every block (or past the caller's window), so their sums change nothing
// the caller reads. narr is a run-time value so that a caller choosing between one and three
// arrays holds one copy of the merge (each copy is among the kernel's largest pieces of code),
// and the merge is not inlined, so the kernel holds one copy in all (its two to three call sites
// inlined it before: the fp32 counting sampler's cubin 121.7 -> 114.9 KB, NVRTC ~6% less).
//
// `synced`: a cluster barrier has passed since every block's histogram was complete (an exchange
// right before), which then serves as the merge's first.
KJIT_DEVICE __noinline__ void cluster_merge(int narr, u32* a0, u32* a1, u32* a2, int nb, u32* own,
                                            bool synced = false) {
  if (!synced) cluster_sync();  // every block's histogram is complete
  const u32 n = cluster_size(), me = cluster_rank();
  const int nq = (nb + 3) >> 2;                  // quads holding bins [0, nb)
  const int chunk = (nq + int(n) - 1) / int(n);  // quads per owner, at most kOwnBins / 4
  for (int it = int(threadIdx.x); it < narr * chunk; it += int(blockDim.x)) {
    const int a = it / chunk, j = it - a * chunk, quad = int(me) * chunk + j;
    if (quad < nq) {
      u32* arr = a == 0 ? a0 : (a == 1 ? a1 : a2);
      uint4 sum;
      sum.x = sum.y = sum.z = sum.w = 0u;
#pragma unroll 4
      for (u32 q = 0; q < n; ++q) {
        const uint4 o = reinterpret_cast<const uint4*>(cluster_map(arr, q))[quad];
        sum = make_uint4(sum.x + o.x, sum.y + o.y, sum.z + o.z, sum.w + o.w);
      }
      reinterpret_cast<uint4*>(own + a * kOwnBins)[j] = sum;
    }
  }
  cluster_sync();  // every share is summed, and no block reads the histograms any more
  for (int it = int(threadIdx.x); it < narr * nq; it += int(blockDim.x)) {
    const int a = it / nq, quad = it - a * nq;
    const int q = quad / chunk;
    u32* arr = a == 0 ? a0 : (a == 1 ? a1 : a2);
    reinterpret_cast<uint4*>(arr)[quad] =
        reinterpret_cast<const uint4*>(cluster_map(own, u32(q)) + a * kOwnBins)[quad - q * chunk];
  }
  __syncthreads();
}

// ---- filter_kernel's phases ----

// filter_kernel's shared memory: the arrays it declares, for its phases. 16-byte aligned for
// the cluster merge's quad accesses: cnt, mhi, mlo and own. The exact search keeps its
// significands' half sums in the two fixed-point mass arrays, which it does not otherwise use.
struct FilterSmem {
  u32* cnt;         // [kBins] key counts; list mode: the block's list
  u32* mhi;         // [kBins]
  u32* mlo;         // [kBins]
  u64* seg;         // [kMaxSegments] kept fixed-point weight per segment (fixed_weight)
  double* red_d;    // [64] two block-wide fp64 reductions or scans at once
  float* red_f;     // [32]
  u32* red_u;       // [32]
  u64* red_u64;     // [32]
  int* found;       // [4]
  u64* rem;         // the draw's remainder within the chosen segment
  u32* own;         // [3 * kOwnBins] on a cluster: cluster_merge's shares, the leader's list;
                    // one block: [kRankCap], top-k's list
  ClusterRed* xch;  // [2] cluster_exchange's slots
  ClusterRed* xin;  // [kMaxCluster]
  u64* rng;         // [2] a cluster leader's seed and offset
};

// A row's filter parameters, uniform across the block.
struct RowParams {
  bool bad = false;  // a parameter out of range: the row is invalid
  bool use_k = false, use_p = false, use_minp = false;
  int top_k = 0;
  float top_p = 1.0f, min_p = 0.0f;
  bool greedy = false;  // logits at temperature 0 (or so small that only the maximum survives)
  float c_log2 = 0.0f;  // logits: log2(e) / T
};

// mass: filter_kernel's. The exact-mass kernels have no top-k search (see mass = 1 there): a row
// with a top-k is invalid in them.
template <int input, int mass>
KJIT_DEVICE KJIT_FORCEINLINE RowParams read_row_params(const SamplingParams& p, i64 r, int vocab) {
  constexpr float kMaxFinite = 3.40282347e38f;
  RowParams q;
  if (p.filters & kFilterTopK) {
    if (p.top_k_arr == nullptr) {
      q.top_k = p.top_k;
    } else if (p.top_k_i64) {
      const i64 k = static_cast<const i64*>(p.top_k_arr)[r];
      q.top_k = k <= 0 ? 0 : (k >= i64(vocab) ? vocab : int(k));
    } else {
      q.top_k = static_cast<const int*>(p.top_k_arr)[r];
    }
    const bool in_range = q.top_k > 0 && q.top_k < vocab;
    if (mass) {
      q.bad |= in_range;
    } else {
      q.use_k = in_range;
    }
  }
  if (p.filters & kFilterTopP) {
    q.top_p = p.top_p_arr == nullptr ? p.top_p : p.top_p_arr[r];
    q.bad |= !(q.top_p > 0.0f);
    q.use_p = q.top_p < 1.0f;
  }
  if (p.filters & kFilterMinP) {
    q.min_p = p.min_p_arr == nullptr ? p.min_p : p.min_p_arr[r];
    q.bad |= !(q.min_p <= 1.0f);
    q.use_minp = q.min_p > 0.0f;
  }
  if (input == kInputLogits) {
    const float t = p.temp_arr == nullptr ? p.temperature : p.temp_arr[r];
    q.bad |= !(t >= 0.0f && t <= kMaxFinite);
    q.c_log2 = 1.44269504088896341f / t;
    q.greedy = t == 0.0f || !(q.c_log2 <= kMaxFinite);
  }
  return q;
}

// rank_list (a list of at most kRankCap keys in `own`, a top-k of k): every key of the list is
// ranked against the others in one pass (descending key, then list index: unique ranks), which
// gives the k-th largest key kk; with a top-p, the top-k set's weight keys are then ranked the
// same way, placed in that order, and their weights prefix-summed in fp64 in that order, the same
// sums whatever order the list arrived in (equal keys are equal weights). The top-p threshold kp
// is the smallest weight key whose mass strictly above (the prefix at its first tie) is below
// p * mass (0 without a top-p). On a few hundred keys that is a handful of barriers where two
// top-k levels and three top-p levels (each a 2048-bin clear, a scan and their barriers) were
// about forty. Called by every thread of the block. (Not inlining it changed no sampler's NVRTC
// time beyond the noise.) cnt, mlo, mhi: scratch ([kBins] each); red_d: block_exclusive_scan's;
// found[0..2]: overwritten.
struct RankedThresholds {
  u32 kk, kp;
};
template <int input>
KJIT_DEVICE KJIT_FORCEINLINE RankedThresholds rank_list(const u32* own, u32* cnt, u32* mlo,
                                                        u32* mhi, double* red_d, int* found, u32 n,
                                                        u32 k, bool use_p, float top_p, float vmax,
                                                        float c_log2) {
  if (threadIdx.x == 0) {
    found[0] = 0;
    found[1] = -1;
    found[2] = 0;
  }
  __syncthreads();
  for (u32 i = threadIdx.x; i < n; i += blockDim.x) {
    if (rank_desc(own, n, i) == k - 1) found[0] = static_cast<int>(own[i]);
  }
  __syncthreads();
  RankedThresholds t{static_cast<u32>(found[0]), 0u};
  if (!use_p) return t;
  for (u32 i = threadIdx.x; i < n; i += blockDim.x) {
    const u32 key = own[i];
    if (key >= t.kk) {
      const u32 slot = atomicAdd(reinterpret_cast<u32*>(&found[2]), 1u);
      // The weight of a top-k key (probabilities: the key's own value).
      float w = input == kInputProbs ? nonneg_value(key) : signed_value(key);
      if (input == kInputLogits) w = exp_weight(w, vmax, c_log2);
      cnt[slot] = nonneg_key(w);
    }
  }
  __syncthreads();
  const u32 m = static_cast<u32>(found[2]);
  for (u32 i = threadIdx.x; i < m; i += blockDim.x) {
    mlo[rank_desc(cnt, m, i)] = cnt[i];  // descending weight keys
  }
  __syncthreads();
  double* prefix = reinterpret_cast<double*>(mhi);  // m <= kRankCap doubles
  const int per = (int(m) + int(blockDim.x) - 1) / int(blockDim.x);
  const int r0 = int(threadIdx.x) * per;
  const int r1 = r0 + per < int(m) ? r0 + per : int(m);
  double local = 0.0;
  for (int j = r0; j < r1; ++j) local += double(nonneg_value(mlo[j]));
  double total;
  double run = block_exclusive_scan<double>(local, red_d, &total);
  for (int j = r0; j < r1; ++j) {
    prefix[j] = run;
    run += double(nonneg_value(mlo[j]));
  }
  __syncthreads();
  const double target = double(top_p) * total;
  for (int j = r0; j < r1; ++j) {
    int first = j;
    while (first > 0 && mlo[first - 1] == mlo[j]) --first;
    if (prefix[first] < target) atomicMax(&found[1], j);
  }
  __syncthreads();
  const int last = found[1];
  t.kp = last >= 0 ? mlo[last] : 0u;
  return t;
}

// One row of filter_kernel (the template parameters are the kernel's): the row's state, and
// the kernel's phases as member functions, which the kernel calls in order. The state is what
// one phase hands the next (the maximum, the mass, the thresholds, the list-mode flags); every
// member is uniform across the block except where noted.
template <typename dtype, int vec, int unroll, int input, int op, int cluster, int mass>
struct FilterRow {
  const SamplingParams& p;
  const FilterSmem s;
  const int vocab, nseg;
  const u32 csize, crank;
  const i64 r;
  const dtype* const row;
  dtype* const out_row;
  RowWalk<dtype, vec, unroll> walk;
  const bool leader;       // the block that writes a sampled row's result
  const u32 mhi_a, mlo_a;  // s.mhi's and s.mlo's shared-window addresses (add_significand)
  int xpar = 0;            // cluster_exchange's slot
  RowParams prm;
  bool need_hist = false;  // pass 0 builds the first level of a key histogram
  bool exact = false;      // the exact top-p search (see mass = 1 at filter_kernel)
  // Pass 0: validity, the maximum (of x, or for probabilities of w), the mass, and for greedy
  // rows the packed (key, index) of the maximum (per thread until reduced).
  bool bad = false;
  float vmax = -__int_as_float(0x7f800000);
  double wsum = 0.0;
  u64 best = 0;
  u32 kmax = 0;       // the largest weight's key (mask: the largest logit key)
  FixedScale fs{};    // the draw's fixed-point weights (fixed_scale(kmax); sampling only)
  u32 threshold = 0;  // top-k's on topk_key, then the kept weight key kw
  // A token is kept when its weight's key is >= kw and, for logits under a top-k, its logit's
  // key is >= kx (for probabilities the two keys are one, and kx folds into kw).
  u32 kx = 0;
  bool x_filter = false;
  // List modes (see send_list, rank_finish and top-p's list levels).
  u32 list_n = 0;
  bool klist = false;   // the top-k list was sent (the same in every block)
  bool ranked = false;  // the leader (one block: the block) finished top-k (and top-p) by ranking
  u32 kp_ranked = 0;    // rank_finish's top-p threshold
  bool list_mode = false;  // exact-mass clusters: the leader searches a list of keys
  // One block, exact top-p (see topp_list_level): the list's pass also summed the segments' kept
  // weights above the window, and each list entry is (segment << kListKeyBits) | (key - list_base).
  bool seg_fused = false;
  u32 list_base = 0;

  KJIT_DEVICE KJIT_FORCEINLINE FilterRow(const SamplingParams& params, const FilterSmem& smem)
      : p(params),
        s(smem),
        vocab(params.vocab),
        nseg((params.vocab + 32 * vec * unroll - 1) / (32 * vec * unroll)),
        csize(cluster ? cluster_size() : 1u),
        crank(cluster ? cluster_rank() : 0u),
        r(cluster ? i64(blockIdx.x / csize) : i64(blockIdx.x)),
        row(static_cast<const dtype*>(params.input) + r * params.in_stride),
        out_row(op == kOpSample ? nullptr
                                : static_cast<dtype*>(params.out) + r * params.out_stride),
        walk{row, vocab, 0, 0x7fffffff, !cluster},
        leader(crank == 0u),
        mhi_a(smem_addr(smem.mhi)),
        mlo_a(smem_addr(smem.mlo)) {}

  // ---- Cluster combinations; no-ops on the one-block path. `synced`: see cluster_merge ----
  KJIT_DEVICE KJIT_FORCEINLINE void cl_merge1(int nb, bool synced = false) {
    if (cluster) cluster_merge(1, s.cnt, s.cnt, s.cnt, nb, s.own, synced);
  }
  KJIT_DEVICE KJIT_FORCEINLINE void cl_merge_sig(int nb, bool synced = false) {
    if (cluster) cluster_merge(2, s.mhi, s.mlo, s.mlo, nb, s.own, synced);
  }
  KJIT_DEVICE KJIT_FORCEINLINE void cl_sum(double& a, double& b) {
    if (cluster) {
      ClusterRed v{a, b, 0.0f, 0u, 0ull};
      cluster_exchange(v, s.xch, s.xin, xpar);
      a = v.s0;
      b = v.s1;
    }
  }
  // The keys one block's exact top-p list holds (s.own: p.list_cap in dynamic shared memory,
  // else the static kListLocal).
  KJIT_DEVICE KJIT_FORCEINLINE u32 list_cap() const {
    return p.list_cap > 0 ? static_cast<u32>(p.list_cap) : kListLocal;
  }
  // A block may leave only when no other block of its cluster still reads its shared memory.
  KJIT_DEVICE KJIT_FORCEINLINE void cl_leave() {
    if (cluster) cluster_sync();
  }

  // ---- Keys and weights ----
  KJIT_DEVICE KJIT_FORCEINLINE float weight(float x) const {
    if constexpr (input == kInputLogits) {
      return exp_weight(x, vmax, prm.c_log2);
    } else {
      return x;
    }
  }
  // The key top-k ranks by: the probability's, or the logit's.
  KJIT_DEVICE KJIT_FORCEINLINE u32 topk_key(float x) const {
    if constexpr (input == kInputProbs) {
      return nonneg_key(x);
    } else {
      return signed_key(x);
    }
  }
  KJIT_DEVICE KJIT_FORCEINLINE bool in_topk(float x) const {
    return !x_filter || signed_key(x) >= kx;
  }
  // Pass 0's histogram: a count per key bin, or (exact) the bin's significand sum.
  KJIT_DEVICE KJIT_FORCEINLINE void add_first_level(u32 key) {
    if (exact) {
      add_significand(mhi_a, mlo_a, int(key >> 20), key);
    } else {
      atomicAdd(&s.cnt[key >> 20], 1u);
    }
  }

  // ---- Setup: the draw's seed, the cluster block's share, the row's parameters ----
  KJIT_DEVICE KJIT_FORCEINLINE void prepare() {
    // The draw reads the seed and offset last, where even an L2 hit is a round trip on the
    // critical path. A cluster's leader loads them now, beside its share's copy, and keeps them
    // in s.rng; one block a row (no copy to hide the load behind) prefetches them into L2
    // instead, at no register cost.
    const bool rng_early = cluster && op == kOpSample && leader && threadIdx.x == 0;
    u64 rng_seed = 0, rng_offset = 0;
    if (op == kOpSample && leader && threadIdx.x == 0) {
      if (cluster) {
        rng_seed = p.seed[r * p.seed_stride];
        rng_offset = p.offset[r * p.offset_stride];
      } else {
        asm volatile("prefetch.L2 [%0];" ::"l"(p.seed + r * p.seed_stride));
        asm volatile("prefetch.L2 [%0];" ::"l"(p.offset + r * p.offset_stride));
      }
    }
    if (cluster) stage_share();
    if (rng_early) {
      s.rng[0] = rng_seed;
      s.rng[1] = rng_offset;
    }
    prm = read_row_params<input, mass>(p, r, vocab);
    // Top-k ranks logits by the logit itself (exact, and no exp needed for its passes); every
    // other threshold is on the weight. Pass 0 histograms the top-k key when there is a top-k,
    // else (probabilities or logits with top-p) the weight's key, which then needs the maximum
    // first for logits (pass 0b).
    need_hist = input == kInputLogitKeys ? prm.use_k : (prm.use_k || prm.use_p);
    // Uniform across the block and the cluster.
    exact = mass && input != kInputLogitKeys && prm.use_p && !prm.use_k;
    if (need_hist) {
      if (exact) {
        clear_bins(s.mhi);
        clear_bins(s.mlo);
      } else {
        clear_bins(s.cnt);
      }
    }
    __syncthreads();
  }

  // The cluster block's share of the row's segments. When the launch gives the room, the share
  // is read from global memory once and every pass walks the copy: a pass then costs shared-
  // memory time, not an L2 round trip per step. The walk keeps global indices, so it reads
  // through a pointer offset by the share's start (only indices inside the share are ever
  // formed into addresses).
  KJIT_DEVICE KJIT_FORCEINLINE void stage_share() {
    constexpr int kSeg = 32 * vec * unroll;
    const int share = (nseg + int(csize) - 1) / int(csize);
    walk.seg_lo = int(crank) * share;
    walk.seg_hi = walk.seg_lo + share < nseg ? walk.seg_lo + share : nseg;
    extern __shared__ __align__(16) unsigned char s_dyn[];
    const int lo = walk.seg_lo * kSeg;
    const int len =
        walk.seg_lo < nseg ? (walk.seg_hi * kSeg < vocab ? walk.seg_hi * kSeg : vocab) - lo : 0;
    if (len > 0 && u64(len) * sizeof(dtype) <= u64(dynamic_smem_bytes())) {
      dtype* cache = reinterpret_cast<dtype*>(s_dyn);
      constexpr int kCopyUnroll = 4;
      const int step = int(blockDim.x) * vec;
      for (int base = int(threadIdx.x) * vec; base < len; base += step * kCopyUnroll) {
        Vec<dtype, vec> v[kCopyUnroll];
#pragma unroll
        for (int u = 0; u < kCopyUnroll; ++u) {
          if (base + u * step < len) v[u].load(row + lo + base + u * step);
        }
#pragma unroll
        for (int u = 0; u < kCopyUnroll; ++u) {
          if (base + u * step < len) v[u].store(cache + base + u * step);
        }
      }
      __syncthreads();
      walk.row = cache - lo;
    }
  }

  // ---- Pass 0: validity, maximum, mass; the first level of the key histogram ----
  KJIT_DEVICE KJIT_FORCEINLINE void scan_row() {
    constexpr float kMaxFinite = 3.40282347e38f;
    const bool use_k = prm.use_k, greedy = prm.greedy;
    if (input == kInputProbs) {
      // Validity from the walk's minimum and sum rather than a test an element: a negative weight
      // leaves the minimum below zero (-0.0 counts as zero, as v >= 0 did), a NaN or an infinity
      // leaves the thread's fp64 sum NaN or infinite (fminf / fmaxf skip a NaN, the sum does not).
      float vmin = __int_as_float(0x7f800000);
      const auto visit = [&](float v) {
        vmin = fminf(vmin, v);
        wsum += double(v);
        vmax = fmaxf(vmax, v);
      };
      // Two walks rather than a test per element: under that test the histogram's shared
      // addresses were derived again at every element.
      if (need_hist) {
        walk.run([&](int, float v) {
          visit(v);
          add_first_level(nonneg_key(v));
        });
      } else {
        walk.run([&](int, float v) { visit(v); });
      }
      bad |= !(vmin >= 0.0f) || !(wsum <= 1.7976931348623157e308);
    } else {
      walk.run([&](int i, float x) {
        bad |= x != x;
        vmax = fmaxf(vmax, x);
        if (input == kInputLogits && greedy) {
          const u64 packed = (u64(signed_key(x)) << 32) | u64(0xffffffffu - u32(i));
          best = packed > best ? packed : best;
        }
        if (input != kInputProbs && use_k) atomicAdd(&s.cnt[signed_key(x) >> 21], 1u);
      });
    }
    block_sum_max_any<input == kInputProbs>(wsum, vmax, bad, s.red_d, s.red_f, s.red_u);
    if (cluster) {
      ClusterRed v{wsum, 0.0, vmax, bad ? 1u : 0u, 0ull};
      cluster_exchange(v, s.xch, s.xin, xpar);
      wsum = v.s0;
      vmax = v.m;
      bad = v.flag != 0u;
    }
    // Logits: a +Inf maximum makes exp(x - max) NaN, a -Inf one means no token has any weight.
    if (input == kInputLogits) bad |= !(vmax >= -kMaxFinite && vmax <= kMaxFinite);
    if (input == kInputProbs) bad |= !(wsum > 0.0);
    bad |= prm.bad;
  }

  // The rows pass 0 settles: invalid ones, masks with nothing to mask, greedy logits. True when
  // the row is done (its result written).
  KJIT_DEVICE KJIT_FORCEINLINE bool finish_settled_row() {
    if (input == kInputLogitKeys && (bad || !prm.use_k)) {
      // Nothing to mask: NaN rows propagate unchanged (a sampler then reports them invalid).
      if (out_row != row)
        write_row<dtype, vec, unroll>(row, out_row, vocab, [](float x) { return x; });
      return true;
    }
    if (bad) {
      if (op == kOpSample) {
        if (threadIdx.x == 0 && leader) write_sample(p, r, -1);
      } else if (op == kOpRenorm) {
        write_row<dtype, vec, unroll>(row, out_row, vocab, [](float) { return 0.0f; });
      }
      cl_leave();
      return true;
    }
    if (input == kInputLogits && prm.greedy) {
      best = block_max_u64(best, s.red_u64);
      if (cluster) {
        ClusterRed v{0.0, 0.0, 0.0f, 0u, best};
        cluster_exchange(v, s.xch, s.xin, xpar);
        best = v.best;
      }
      if (threadIdx.x == 0 && leader) {
        write_sample(p, r, i64(0xffffffffu - u32(best & 0xffffffffu)));
      }
      cl_leave();
      return true;
    }
    return false;
  }

  // Pass 0b (logits with a top-p and no top-k): the mass and the first histogram level of the
  // weights, now that the maximum is known (with a top-k, top-p's mass is the top-k set's, found
  // later). Then the first level's cluster merge, and kmax.
  KJIT_DEVICE KJIT_FORCEINLINE void scan_weights() {
    if (input == kInputLogits && prm.use_p && !prm.use_k) {
      walk.run([&](int, float x) {
        const float w = weight(x);
        wsum += double(w);
        add_first_level(nonneg_key(w));
      });
      wsum = block_sum<double>(wsum, s.red_d);
      double unused = 0.0;
      cl_sum(wsum, unused);
    }
    // Pass 0 (or 0b) built the first histogram level of whichever search comes next. No key
    // exceeds the row maximum's, so the bins above its bin are zero in every block and stay out
    // of the merge (for probabilities that is half of them). Pass 0b's weights are below 2 (ex2
    // of a value <= 0, approximate), so its bins stop at 2.0's. The exchange that closed pass 0
    // (or 0b) came after every block's histogram was complete, and nothing has touched the
    // histograms since: its barrier is the merge's first.
    if (need_hist) {
      int nb0 = kBins;
      if (input == kInputProbs) nb0 = int(nonneg_key(vmax) >> 20) + 1;
      if (input == kInputLogits && prm.use_k) nb0 = int(signed_key(vmax) >> 21) + 1;
      if (input == kInputLogits && !prm.use_k) nb0 = int(nonneg_key(2.0f) >> 20);
      if (exact) {
        cl_merge_sig(nb0, true);
      } else {
        cl_merge1(nb0, true);
      }
    }
    // The largest weight's key (for logits, exp(0) = 1).
    kmax = input == kInputLogitKeys ? signed_key(vmax) : nonneg_key(weight(vmax));
    if (op == kOpSample) fs = fixed_scale(kmax);
  }

  // List mode: every block sends the keys key_of(x) in [wlo, wlo + wspan] of its share to the
  // leader's s.own (rank order: an exchange of the counts gives the offsets) and sums the
  // weights of the keys above the window; on return (true) the leader holds all list_n keys and
  // `above` the cluster's sum. False, the same in every block, when the keys do not fit (more
  // than kListLocal in a block or kListCap in all): nothing was sent. One block a row (the exact
  // top-p window's list) keeps at most list_cap() keys in its s.own. The list's order within a
  // block is the order of its atomics, so only integer sums may be taken over it.
  // fuse (one block; wspan <= kListKeyMask): the pass also stores each segment's fixed-point sum
  // of the weights above the window in s.seg, and the entries carry their segment (seg_fused's
  // form), so that the draw needs no pass of its own.
  template <typename KeyOf>
  KJIT_DEVICE KJIT_FORCEINLINE bool send_list(KeyOf key_of, u32 wlo, u32 wspan, double& above,
                                              bool fuse = false) {
    // One block writes its list in place (s.own), a cluster's blocks theirs into s.cnt first.
    u32* const local = cluster ? s.cnt : s.own;
    const u32 cap = cluster ? kListLocal : list_cap();
    if (threadIdx.x == 0) s.found[3] = 0;
    __syncthreads();
    double a = 0.0;
    fuse = !cluster && fuse;
    const int lane = int(threadIdx.x) & 31;
    u64 acc = 0;
    walk.run(
        [&](int i, float x) {
          const u32 key = key_of(x);
          if (key - wlo > wspan) {  // wraps for keys below the window
            if (key > wlo) {
              const float wt = weight(x);
              a += double(wt);
              if (fuse) acc += fixed_weight(wt, fs);
            }
          } else {
            const u32 slot = atomicAdd(reinterpret_cast<u32*>(&s.found[3]), 1u);
            if (slot < cap) {
              local[slot] =
                  fuse ? (u32(i / (32 * vec * unroll)) << kListKeyBits) | (key - wlo) : key;
            }
          }
        },
        [&](int sg) {
          // The sum outside the branch: shuffles under a runtime condition compile behind a
          // divergence check.
          const u64 total = warp_sum(acc);
          if (fuse && lane == 0) s.seg[sg] = total;
          acc = 0;
        });
    a = block_sum<double>(a, s.red_d);  // ends on a barrier: every slot is taken
    const u32 n_local = static_cast<u32>(s.found[3]);
    if constexpr (!cluster) {
      if (n_local > cap) return false;
      list_n = n_local;
      above = a;
      seg_fused = fuse;
      list_base = wlo;
      return true;
    }
    ClusterRed v{a, 0.0, 0.0f, n_local > kListLocal ? 1u : 0u, u64(n_local)};
    cluster_exchange(v, s.xch, s.xin, xpar);
    // s.xin still holds every rank's values (until the next exchange).
    u32 offset = 0;
    u64 total = 0;
    for (u32 q = 0; q < csize; ++q) {
      if (q < crank) offset += static_cast<u32>(s.xin[q].best);
      total += s.xin[q].best;
    }
    if (v.flag != 0u || total > kListCap) return false;
    u32* list = cluster_map(s.own, 0u);
    for (u32 i = threadIdx.x; i < n_local; i += blockDim.x) list[offset + i] = s.cnt[i];
    cluster_sync();  // the leader's list is whole
    list_n = static_cast<u32>(total);
    above = v.s0;
    return true;
  }

  // Key i of the exact top-p list (seg_fused: unpacked).
  KJIT_DEVICE KJIT_FORCEINLINE u32 list_key(u32 i) const {
    const u32 e = s.own[i];
    return seg_fused ? list_base + (e & kListKeyMask) : e;
  }

  // rank_finish (the leader; one block: the block): top-k and top-p on the list of list_n keys
  // in s.own, by rank_list.
  KJIT_DEVICE KJIT_FORCEINLINE void rank_finish(u32 k) {
    const RankedThresholds t = rank_list<input>(s.own, s.cnt, s.mlo, s.mhi, s.red_d, s.found,
                                                list_n, k, prm.use_p, prm.top_p, vmax, prm.c_log2);
    threshold = t.kk;
    kp_ranked = t.kp;
    ranked = true;
  }

  // ---- Top-k: radix select on counts ----
  // Top-k list mode: after the first level the keys at or above the k-th largest's bin are few
  // on a language model's row (above + in_above + c, the same in every block: a few hundred for
  // k = 50). When at most kRankCap, top-k and top-p are finished on that list by ranking
  // (rank_finish). On a cluster every block sends its keys to the leader, which ranks them and
  // sends both thresholds back: the later levels' walks, merges and the other blocks' redundant
  // searches go, and the other blocks (followers) skip to the thresholds' arrival. One block a
  // row collects the list itself: one pass instead of the later levels', whose passes on a
  // large batch read the row from memory again each (its rows do not stay in L2). More
  // candidates take the levels below: a list searched level by level (top-k, then top-p by
  // significand sums) was a second copy of both searches in the kernel, which doubled its
  // compile time for rows with an unusually large k.
  KJIT_DEVICE KJIT_FORCEINLINE void topk_search() {
    if (!prm.use_k) return;
    u32 lo = 0, hi = input == kInputProbs ? 0x7fffffffu : 0xffffffffu;
    int sh = input == kInputProbs ? 20 : 21;
    u32 above = 0;  // keys > hi
    const u32 k = static_cast<u32>(prm.top_k);
    for (int level = 0;; ++level) {
      int b;
      u32 in_above, c;
      find_count_bin(s.cnt, bins_of(lo, hi, sh), k - above, s.red_u, s.found, b, in_above, c);
      const bool done = sh == 0 || above + in_above + c == k;
      // A list when a search is left: top-k's next levels, or top-p on the top-k set.
      bool list = false;
      if (level == 0 && (!done || prm.use_p) && above + in_above + c <= kRankCap) {
        const u32 klo = lo + (u32(b) << sh);
        if constexpr (cluster) {
          double unused;
          klist = send_list([&](float x) { return topk_key(x); }, klo, ~klo, unused);
          if (klist) {
            if (leader) rank_finish(k);
            break;
          }
        } else {
          // One block collects the keys >= klo itself, in the level walk below (one copy of the
          // walk in the kernel), and ranks them.
          list = true;
          lo = klo;
          hi = ~0u;
        }
      }
      if (done && !list) {
        // Either a single key, or every key of the bin is among the top k: the k-th largest is
        // the bin's smallest key, and no key lies between the bin's start and it.
        threshold = lo + (u32(b) << sh);
        break;
      }
      if (!list) {
        above += in_above;
        lo += u32(b) << sh;
        hi = lo + ((u32(1) << sh) - 1);
        sh = sh > 11 ? sh - 11 : 0;
        clear_bins(s.cnt);
      } else if (threadIdx.x == 0) {
        s.found[3] = 0;
      }
      __syncthreads();
      const u32 wlo = lo, wspan = hi - lo;
      const int bsh = sh;
      walk.run([&](int, float x) {
        const u32 key = topk_key(x);
        const u32 d = key - wlo;  // wraps for keys below the window
        if (d <= wspan) {
          if (!list) {
            atomicAdd(&s.cnt[d >> bsh], 1u);
          } else {
            const u32 slot = atomicAdd(reinterpret_cast<u32*>(&s.found[3]), 1u);
            if (slot < kRankCap) s.own[slot] = key;  // pass 0 counted at most kRankCap
          }
        }
      });
      __syncthreads();
      if (list) {
        const u32 n = static_cast<u32>(s.found[3]);
        list_n = n < kRankCap ? n : kRankCap;
        rank_finish(k);
        break;
      }
      cl_merge1(bins_of(lo, hi, sh));
    }
  }

  // Masking: logits whose key is below top-k's threshold become -Inf.
  KJIT_DEVICE KJIT_FORCEINLINE void write_mask() {
    const u32 t = threshold;
    const float inf = __int_as_float(0x7f800000);
    write_row<dtype, vec, unroll>(row, out_row, vocab,
                                  [t, inf](float x) { return signed_key(x) >= t ? x : -inf; });
  }

  // ---- Top-p: radix search on mass bounds ----
  // One level pass: counts and fixed-point mass of the window's keys, exact mass above it.
  // Sums are fp64 from the first term: their order depends on how the row is split (one
  // block or a cluster), and fp64 keeps that from moving the threshold except at ties within
  // about 1e-16 of p * mass.
  KJIT_DEVICE KJIT_FORCEINLINE void level_pass(Window& w, double& in_window) {
    if (!exact) clear_bins(s.cnt);
    clear_bins(s.mhi);
    clear_bins(s.mlo);
    __syncthreads();
    double a = 0.0, b = 0.0;
    const u32 wlo = w.lo, wspan = w.hi - w.lo;
    const int sh = w.s;
    const float sc = w.scale;
    walk.run([&](int, float x) {
      if (!in_topk(x)) return;
      const float wt = weight(x);
      const u32 d = nonneg_key(wt) - wlo;  // wraps for keys below the window
      if (d > wspan) {
        if (nonneg_key(wt) > wlo) a += double(wt);  // above the window
      } else {
        const int bin = static_cast<int>(d >> sh);
        if (exact) {
          add_significand(mhi_a, mlo_a, bin, nonneg_key(wt));
          b += double(wt);
        } else {
          atomicAdd(&s.cnt[bin], 1u);
          b += double(wt);
          const u32 q = static_cast<u32>(__fmul_rz(wt, sc));  // 0 when there is no scale
          if (q >> 12) atomicAdd(&s.mhi[bin], q >> 12);
          if (q & 4095u) atomicAdd(&s.mlo[bin], q & 4095u);
        }
      }
    });
    block_sum2<double>(a, b, s.red_d);
    w.above = a;
    in_window = b;
    // The two sums cross the cluster on the merge's first barrier. Without a fixed-point
    // scale, or with single-key bins, the bounds use counts alone (bin_bounds), so the two
    // mass arrays need not cross it.
    ClusterRed v{w.above, in_window, 0.0f, 0u, 0ull};
    if (cluster) cluster_publish(v, s.xch, xpar);
    if (exact) {
      cl_merge_sig(bins_of(w.lo, w.hi, w.s));
    } else if (cluster) {
      // One call site for both forms: the merge's code is the kernel's largest per copy.
      cluster_merge(w.have_mass && w.s > 0 ? 3 : 1, s.cnt, s.mhi, s.mlo, bins_of(w.lo, w.hi, w.s),
                    s.own);
    }
    if (cluster) {
      cluster_gather(v, s.xch, s.xin, xpar);
      w.above = v.s0;
      in_window = v.s1;
    }
  }

  KJIT_DEVICE KJIT_FORCEINLINE void set_scale(Window& w) const {
    const float wtop = nonneg_value(w.hi < kmax ? w.hi : kmax);
    const float sc = wtop > 0.0f ? 16777216.0f / wtop : 0.0f;
    w.have_mass = sc > 0.0f && sc <= 3.40282347e38f;  // the largest finite float
    w.scale = w.have_mass ? sc : 0.0f;
  }

  // Top-p's first window and its target p * mass. Top-k first: the target is the top-k set's,
  // which the first level's pass sums (topp_levels); returns a negative target then.
  KJIT_DEVICE KJIT_FORCEINLINE double topp_first_window(Window& w) {
    w.kmax = kmax;
    if (prm.use_k) {
      // Top-k first: p is relative to the top-k set's mass, the first window is that set (for
      // logits: every weight, counting only the tokens the logit threshold keeps).
      w.lo = threshold;
      w.hi = kmax;
      w.s = fit_shift(w.lo, w.hi);
      set_scale(w);
      return -1.0;
    }
    // The first level is pass 0's histogram (counts only, bounds from the bin edges; exact:
    // the bins' masses).
    w.whole();
    return double(prm.top_p) * wsum;
  }

  // What a top-p level does after narrowing the window.
  enum class ListStep { kWalk, kNextLevel, kStop };

  // After the window narrowed to [w.lo, w.hi] at `level`: the list mode's part (exact mass).
  // kNextLevel: the leader's list level ran in place of a walk; kStop: a follower leaves the
  // search (the leader sends the threshold); kWalk: the level pass over the row follows.
  // may_fit: false where the window's keys cannot fit one block's list (topp_levels' bound), so
  // no list is tried.
  KJIT_DEVICE KJIT_FORCEINLINE ListStep topp_list_level(Window& w, int level, double& above_outside,
                                                        bool may_fit) {
    if (exact && level == 0 && may_fit) {
      // The window is one first-level bin: a few thousand keys on a language model's row.
      // Every block sends its share of them and the mass above the window to the leader
      // (send_list), which runs the remaining levels on that list alone, with no cluster
      // barrier or merge per level; one block a row collects the list itself, so the levels
      // need no pass over the row (on a large batch each would read it from memory again).
      // Its sums are integers (significands, one binade), so the list's order does not
      // matter. Too many keys for the room: the levels below, each a pass over the row.
      // One block a row sampling also begins the draw's segment sums in that pass (send_list's
      // fuse): the keys above the window are kept whatever the threshold in it, those below are
      // not, and a min-p threshold at or below the window's start changes neither.
      const auto wkey = [&](float x) { return nonneg_key(weight(x)); };
      const bool fuse = !cluster && op == kOpSample && w.hi - w.lo <= kListKeyMask &&
                        (!prm.use_minp || min_p_key() <= w.lo);
      if (send_list(wkey, w.lo, w.hi - w.lo, above_outside, fuse)) {
        list_mode = true;
        if (!leader) return ListStep::kStop;  // the leader sends the threshold
      }
    }
    if (!list_mode) return ListStep::kWalk;
    // A level over the leader's list: significand sums of the window's keys per bin, and
    // of the list's keys above the window (all in the first bin's binade).
    clear_bins(s.mhi);
    clear_bins(s.mlo);
    __syncthreads();
    const u32 wlo = w.lo, wspan = w.hi - w.lo;
    const int sh = w.s;
    u64 above_sig = 0;
    for (u32 i = threadIdx.x; i < list_n; i += blockDim.x) {
      const u32 key = list_key(i);
      if (key - wlo > wspan) {
        if (key > wlo) above_sig += key_significand(key);
      } else {
        add_significand(mhi_a, mlo_a, int((key - wlo) >> sh), key);
      }
    }
    above_sig = block_sum<u64>(above_sig, s.red_u64);  // ends on a barrier
    w.above = above_outside + double(above_sig) * binade_unit(w.lo);
    return ListStep::kNextLevel;
  }

  // The top-p search's levels from the first window on; returns the threshold key. Each level
  // but a list level starts with a pass over the row (level_pass), except the first when pass 0
  // built it; target < 0: the first pass also gives the target (top-k first). One call site of
  // the pass, so the kernel holds one copy of it.
  KJIT_DEVICE KJIT_FORCEINLINE u32 topp_levels(Window& w, double target) {
    u32 kp = w.lo;
    double above_outside = 0.0;  // list mode: the mass above the first window
    bool walk_level = target < 0.0;
    for (int level = 0;; ++level) {
      if (walk_level) {
        double in_window;
        level_pass(w, in_window);
        if (target < 0.0) target = double(prm.top_p) * (w.above + in_window);
      }
      int b0, b1;
      const int nb = bins_of(w.lo, w.hi, w.s);
      if (exact) {
        find_mass_bins<true, (cluster > 0)>(s.cnt, s.mhi, s.mlo, w, nb, target, s.red_d, s.found,
                                            b0, b1);
      } else {
        find_mass_bins<false, (cluster > 0)>(s.cnt, s.mhi, s.mlo, w, nb, target, s.red_d, s.found,
                                             b0, b1);
      }
      if (w.s == 0) {
        // Single-key bins: the bounds are exact, so b0 == b1 unless nothing reaches the target.
        kp = b0 >= 0 ? w.lo + u32(b0) : w.lo;
        break;
      }
      const u32 nlo = b0 >= 0 ? w.lo + (u32(b0) << w.s) : w.lo;
      const u32 b1_last = w.lo + (u32(b1) << w.s) + ((u32(1) << w.s) - 1);
      const u32 nhi = w.hi - (u32(b1) << w.s) - w.lo < (u32(1) << w.s) ? w.hi : b1_last;
      if (nhi == nlo || level + 1 >= kMaxTopPLevels || (nlo == w.lo && nhi == w.hi)) {
        // One key left, or (only through rounding) no progress: the window's start is the
        // threshold, which keeps at most the window's keys beyond the exact set.
        kp = nlo;
        break;
      }
      // One block: whether the next window's keys may fit its list. Every key in it weighs at
      // least nlo's value, so its mass over that value bounds the count (exact masses here).
      // A list attempt that overflows costs a pass over the row for nothing.
      bool list_may_fit = true;
      if (!cluster && exact && level == 0 && b0 >= 0) {
        double mass = 0.0;
        for (int b = b0; b <= b1; ++b) mass += exact_bin_mass(s.mhi, s.mlo, w, b);
        const double v = double(nonneg_value(nlo));
        list_may_fit = !(v > 0.0) || mass <= v * double(list_cap());
      }
      w.lo = nlo;
      w.hi = nhi;
      w.s = fit_shift(nlo, nhi);
      set_scale(w);
      const ListStep step = topp_list_level(w, level, above_outside, list_may_fit);
      if (step == ListStep::kStop) break;
      walk_level = step == ListStep::kWalk;
    }
    return kp;
  }

  // Top-p after top-k: for logits, top-k's threshold moves to kx (on the logit key) and the
  // weight threshold starts from 0.
  KJIT_DEVICE KJIT_FORCEINLINE void topp_search() {
    kx = input == kInputLogits && prm.use_k ? threshold : 0u;  // a follower's arrives later
    x_filter = input == kInputLogits && prm.use_k;
    if (input == kInputLogits) threshold = 0;
    const bool follower = cluster && klist && !leader;
    if (prm.use_p && !follower && !ranked) {
      Window w;
      const double target = topp_first_window(w);
      const u32 kp = topp_levels(w, target);
      threshold = kp > threshold ? kp : threshold;
    }
    if (ranked && prm.use_p) threshold = kp_ranked > threshold ? kp_ranked : threshold;
  }

  // After a list mode, the leader's thresholds to the others: the weight key's and, for logits
  // under a top-k, the logit key's. No other block reads its s.found any more.
  KJIT_DEVICE KJIT_FORCEINLINE void share_thresholds() {
    if constexpr (cluster) {
      if (klist || list_mode) {  // the same in every block
        if (leader && threadIdx.x == 0) {
          for (u32 q = 1; q < csize; ++q) {
            *cluster_map(&s.found[2], q) = static_cast<int>(threshold);
            *cluster_map(&s.found[3], q) = static_cast<int>(kx);
          }
        }
        cluster_sync();
        if (!leader) {
          threshold = static_cast<u32>(s.found[2]);
          kx = static_cast<u32>(s.found[3]);
        }
      }
    }
  }

  // Min-p: w >= fl(min_p * w_max).
  KJIT_DEVICE KJIT_FORCEINLINE u32 min_p_key() const {
    return nonneg_key(__fmul_rn(prm.min_p, nonneg_value(kmax)));
  }
  KJIT_DEVICE KJIT_FORCEINLINE void apply_min_p() {
    if (prm.use_minp) {
      const u32 km = min_p_key();
      threshold = km > threshold ? km : threshold;
    }
  }

  // Renormalization: the kept probabilities over their sum, the others 0.
  KJIT_DEVICE KJIT_FORCEINLINE void write_renorm() {
    const u32 t = threshold;
    double kept = 0.0;
    walk.run([&](int, float x) {
      if (nonneg_key(x) >= t) kept += double(x);
    });
    kept = block_sum<double>(kept, s.red_d);
    const float kept_f = static_cast<float>(kept);
    write_row<dtype, vec, unroll>(row, out_row, vocab, [t, kept_f](float x) {
      return nonneg_key(x) >= t ? __fdiv_rn(x, kept_f) : 0.0f;
    });
  }

  // ---- Sample: kept weight per segment, one uniform, inverse CDF in index order ----
  // The kept weights count as fixed_weight's integers, so the draw is exact integer arithmetic
  // and the same on every path. On the cluster path every block stores its segments' sums
  // straight into the leader's s.seg (no one else uses it), so one barrier publishes them; the
  // leader then draws alone, exactly as one block would, and the other blocks, whose shared
  // memory nobody reads any more, leave.
  KJIT_DEVICE KJIT_FORCEINLINE void segment_masses() {
    const u32 t = threshold;
    const int lane = int(threadIdx.x) & 31;
    u64* seg_out = cluster ? cluster_map(s.seg, 0u) : s.seg;
    u64 acc = 0;
    walk.run(
        [&](int, float x) {
          const float wt = weight(x);
          if (nonneg_key(wt) >= t && in_topk(x)) acc += fixed_weight(wt, fs);
        },
        [&](int sg) {
          const u64 total = warp_sum(acc);
          if (lane == 0) seg_out[sg] = total;
          acc = 0;
        });
  }

  // The fused list (seg_fused): the listed keys the threshold keeps join their segments' sums,
  // which the list's pass began with the keys above the window (all kept). Integer atomics, so
  // the list's order does not matter.
  KJIT_DEVICE KJIT_FORCEINLINE void add_listed_to_segments() {
    const u32 t = threshold;
    for (u32 i = threadIdx.x; i < list_n; i += blockDim.x) {
      const u32 e = s.own[i];
      const u32 key = list_base + (e & kListKeyMask);
      if (key >= t)
        atomic_add_u64_shared(&s.seg[e >> kListKeyBits], fixed_weight(nonneg_value(key), fs));
    }
  }

  // The segment the draw lands in: an exclusive scan of the segments' sums (a thread's run of
  // them each), target = floor(u * total) from u's 53 bits, and the one segment whose range
  // holds it, with the remainder in *s.rem. -1 when nothing is kept (never for a valid row: its
  // largest weight counts 2^31 or more). s.found[0] is -1 on entry.
  KJIT_DEVICE KJIT_FORCEINLINE int choose_segment(u64 bits53) {
    __syncthreads();
    const int per = (nseg + int(blockDim.x) - 1) / int(blockDim.x);
    const int j0 = int(threadIdx.x) * per;
    const int j1 = j0 + per < nseg ? j0 + per : nseg;
    u64 local = 0;
    for (int j = j0; j < j1; ++j) local += s.seg[j];
    u64 total;
    u64 run = block_exclusive_scan<u64>(local, s.red_u64, &total);
    const u64 target = __umul64hi(bits53 << 11, total);  // floor(u * total) < total
    for (int j = j0; j < j1; ++j) {
      const u64 next = run + s.seg[j];
      if (run <= target && target < next) {
        s.found[0] = j;
        *s.rem = target - run;
      }
      run = next;
    }
    __syncthreads();
    return s.found[0];
  }

  // One warp rescans the chosen segment for the token the remainder falls on: the same integers
  // the segment's sum was made of, so the remainder always lands on a kept token.
  KJIT_DEVICE KJIT_FORCEINLINE void draw_in_segment(int sel) {
    const u32 t = threshold;
    const int lane = int(threadIdx.x) & 31;
    const u64 rem = *s.rem;
    const int base = sel * (32 * vec * unroll);
    u64 run = 0;
    int pick = -1;
    // Every load of the segment is issued before the first is used: they are L2 round trips on
    // the critical path of the whole launch.
    Vec<dtype, vec> seg_v[unroll];
#pragma unroll
    for (int uu = 0; uu < unroll; ++uu) {
      const int i = base + (uu * 32 + lane) * vec;
      if (i < vocab) seg_v[uu].load(row + i);
    }
#pragma unroll
    for (int uu = 0; uu < unroll; ++uu) {
      const int i = base + (uu * 32 + lane) * vec;
      u32 q[vec];
      u64 lane_sum = 0;
#pragma unroll
      for (int e = 0; e < vec; ++e) {
        q[e] = 0u;
        if (i < vocab) {
          const float x = to_float(seg_v[uu][e]);
          const float wt = weight(x);
          if (nonneg_key(wt) >= t && in_topk(x)) q[e] = fixed_weight(wt, fs);
        }
        lane_sum += q[e];
      }
      u64 incl = lane_sum;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const u64 n = __shfl_up_sync(kFullMask, incl, o);
        if (lane >= o) incl += n;
      }
      const u64 lo = run + (incl - lane_sum);
      // The lanes' ranges tile [run, run + the chunk's sum): at most one holds rem.
      const unsigned hit = __ballot_sync(kFullMask, pick < 0 && lo <= rem && rem - lo < lane_sum);
      if (hit != 0u) {
        const int src = __ffs(hit) - 1;
        int cand = -1;
        if (lane == src) {
          u64 a = lo;
#pragma unroll
          for (int e = 0; e < vec; ++e) {
            if (cand < 0 && rem - a < u64(q[e])) cand = i + e;
            a += q[e];
          }
        }
        pick = __shfl_sync(kFullMask, cand, src);
      }
      run = __shfl_sync(kFullMask, run + incl, 31);
    }
    if (lane == 0) write_sample(p, r, pick);
  }

  // The draw (the leader): one uniform, the segment it lands in, the token within it.
  KJIT_DEVICE KJIT_FORCEINLINE void draw() {
    if (threadIdx.x == 0) s.found[0] = -1;
    const u64 seed = cluster ? s.rng[0] : p.seed[r * p.seed_stride];
    const u64 offset = cluster ? s.rng[1] : p.offset[r * p.offset_stride];
    const int sel = choose_segment(philox_bits53(seed, offset, p.per_row_seed ? 0u : u32(r)));
    if ((int(threadIdx.x) >> 5) != 0) return;
    if (sel < 0) {
      // No kept weight at all (cannot happen for a valid row: its maximum is always kept).
      if ((int(threadIdx.x) & 31) == 0) write_sample(p, r, -1);
      return;
    }
    draw_in_segment(sel);
  }
};

}  // namespace detail

// Launch: grid = rows, block = a multiple of 32 up to 1024 (more threads for longer rows), no
// dynamic shared memory. Requires 1 <= vocab <= kMaxSegments * 32 * vec * unroll, vocab % vec ==
// 0, rows (and out rows) aligned to vec * sizeof(dtype) bytes. input: kInputProbs (dtype float),
// kInputLogits (sample only), kInputLogitKeys (op kOpMask, top-k only). out may be input itself
// (same strides). The template parameters are the host's FilterConfig fields, by name.
//
// cluster = 1 (sample only, sm_90+): grid = rows * n with clusters of n = 2..16 blocks along x,
// block a multiple of 32 up to kClusterMaxThreads. Block q of a row's cluster walks the q-th share
// of the row's segments; the histograms and block-wide values are combined through distributed
// shared memory, and every block takes the same decisions on them, so the thresholds follow the
// one-block path's rule (the list modes finish on one block). Block 0 then draws the token from
// the gathered segment sums with the one-block path's integer arithmetic.
//
// mass = 1 (probabilities or logits; a row with top-p and no top-k): the top-p search sums each
// bin's significands (exact_bin_mass) instead of counting keys and bounding masses.
// The first level's 2^20-key bins each lie in one binade, so their masses are exact and the
// first window is one bin; every later window lies inside it, so its bins' masses are exact too:
// two levels follow pass 0 (shifts 9 and 0) instead of three. On a cluster the blocks then send
// the first window's keys (at most 3072) to the leader, which runs those two levels on the list
// alone and sends the threshold back: three cluster barriers instead of two merges' four, and no
// block repeats the leader's searches. The plan launches these kernels only for rows without a
// top-k (sample_mass), so they hold no top-k search and no counting top-p: a row with a top-k is
// reported invalid. With both searches in one kernel the exact kernels took twice the NVRTC time
// (docs/performance.md, "First-use compile time").
// clang-format off
template <typename dtype, int vec, int unroll, int input, int op, int cluster, int mass>
__global__ void __launch_bounds__(cluster ? kClusterMaxThreads : 1024)
filter_kernel(const __grid_constant__ SamplingParams p) {
  // clang-format on
  static_assert(!cluster || op == kOpSample, "the cluster path samples");
  static_assert(op != kOpMask || input == kInputLogitKeys, "masking works on logit keys");
  static_assert(op == kOpMask || input != kInputLogitKeys, "signed keys are for masking");
  static_assert(op != kOpRenorm || input == kInputProbs, "renormalization is of probabilities");
  __shared__ __align__(16) u32 s_cnt[kBins];
  __shared__ __align__(16) u32 s_mhi[kBins];
  __shared__ __align__(16) u32 s_mlo[kBins];
  __shared__ u64 s_seg[kMaxSegments];
  __shared__ double s_red_d[64];
  __shared__ float s_red_f[32];
  __shared__ u32 s_red_u[32];
  __shared__ u64 s_red_u64[32];
  __shared__ int s_found[4];
  __shared__ u64 s_rem;
  // One block: the top-k list (counting) or the exact top-p window's (mass = 1; in dynamic
  // shared memory instead when p.list_cap > 0, for wide windows).
  __shared__ __align__(16)
      u32 s_own[cluster ? 3 * detail::kOwnBins : (mass ? detail::kListLocal : detail::kRankCap)];
  __shared__ detail::ClusterRed s_xch[2];
  __shared__ detail::ClusterRed s_xin[cluster ? detail::kMaxCluster : 1];
  __shared__ u64 s_rng[2];
  extern __shared__ __align__(16) unsigned char s_list_dyn[];
  u32* const own = !cluster && mass && p.list_cap > 0 ? reinterpret_cast<u32*>(s_list_dyn) : s_own;
  const detail::FilterSmem smem{s_cnt,     s_mhi,   s_mlo,  s_seg, s_red_d, s_red_f, s_red_u,
                                s_red_u64, s_found, &s_rem, own,   s_xch,   s_xin,   s_rng};

  detail::FilterRow<dtype, vec, unroll, input, op, cluster, mass> f(p, smem);
  f.prepare();
  f.scan_row();
  if (f.finish_settled_row()) return;
  f.scan_weights();
  f.topk_search();
  if constexpr (input == kInputLogitKeys) {
    f.write_mask();
    return;
  }
  f.topp_search();
  f.share_thresholds();
  f.apply_min_p();
  if constexpr (op == kOpRenorm) {
    f.write_renorm();
    return;
  }
  if (f.seg_fused) {
    f.add_listed_to_segments();
  } else {
    f.segment_masses();
  }
  if (cluster) {
    cluster_sync();
    if (!f.leader) return;
  }
  f.draw();
}

}  // namespace sampling
}  // namespace kjit
