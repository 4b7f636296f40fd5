// Top-k values and indices of each row (torch.topk(x, k, largest=True, sorted=True)): the k
// largest elements in descending order, equal values by ascending index, NaN above +Inf (as
// torch.sort and torch.topk order it), -0 equal to +0.
//
// Nothing is sorted but the k winners. Each element has a 32-bit key with the order above
// (order_key); the radix search of the samplers (sampling/radix.cuh) finds the k-th largest key T
// in at most three counting passes over the row (11 + 11 + 10 bits), and with it how many keys
// exceed T. When more keys equal T than the k still missing, a second search over the tied
// elements' indices (vocab - 1 - index as the key, so larger is earlier) finds the last index
// admitted. A last pass gathers exactly k candidates into shared memory, and each is written at
// its rank among them (k comparisons a candidate).
#pragma once

#include "common/prelude.cuh"
#include "common/vec.cuh"
#include "sampling/block.cuh"
#include "sampling/radix.cuh"
#include "sampling/top_k_params.h"

namespace kjit {
namespace sampling {

namespace detail {

// x's key in torch.topk's order: NaN (any payload) the largest, -0 and +0 equal.
KJIT_DEVICE KJIT_FORCEINLINE u32 order_key(float x) {
  return x != x ? 0xffffffffu : signed_key(x);
}

struct TopKSmem {
  u32* cnt;    // [kBins]
  u32* scan;   // [32]
  int* found;  // [3]
};

// The need-th largest key (need >= 1) among the row's elements that key_of admits, searched in
// [lo, hi]: returns it, in *above how many admitted keys exceed it and in *equal how many equal
// it. key_of(index, value, &key) says whether an element takes part and with which key.
template <typename Walk, typename KeyOf>
KJIT_DEVICE u32 kth_largest(const Walk& walk, KeyOf key_of, u32 lo, u32 hi, u32 need,
                            const TopKSmem& sm, u32* above, u32* equal) {
  *above = 0;
  for (;;) {
    const int s = fit_shift(lo, hi);
    clear_bins(sm.cnt);
    __syncthreads();
    walk.run([&](int i, float x) {
      u32 key;
      if (key_of(i, x, &key) && key >= lo && key <= hi) atomicAdd(&sm.cnt[(key - lo) >> s], 1u);
    });
    __syncthreads();
    int bin;
    u32 in_above, count;
    find_count_bin(sm.cnt, bins_of(lo, hi, s), need, sm.scan, sm.found, bin, in_above, count);
    *above += in_above;
    need -= in_above;
    lo += static_cast<u32>(bin) << s;
    const unsigned long long top = static_cast<unsigned long long>(lo) + ((1ull << s) - 1);
    hi = top < hi ? static_cast<u32>(top) : hi;
    if (s == 0) {  // a bin of one key
      *equal = count;
      return lo;
    }
  }
}

}  // namespace detail

// Launch: grid = rows, block = a multiple of 32 up to 1024, no dynamic shared memory. vocab %
// vec == 0 and input rows aligned to vec * sizeof(dtype) bytes; 1 <= k <= min(vocab, kTopKMax).
// values and indices overlap nothing else.
// clang-format off
template <typename dtype, int vec, int unroll>
__global__ void __launch_bounds__(1024)
top_k_kernel(const __grid_constant__ TopKParams p) {
  // clang-format on
  __shared__ __align__(16) u32 s_cnt[kBins];
  __shared__ u32 s_scan[32];
  __shared__ int s_found[3];
  __shared__ u32 s_key[kTopKMax];
  __shared__ int s_idx[kTopKMax];
  __shared__ int s_n;
  const detail::TopKSmem sm{s_cnt, s_scan, s_found};

  const long long r = blockIdx.x;
  const dtype* row = static_cast<const dtype*>(p.input) + r * p.in_stride;
  const int vocab = p.vocab, k = p.k;
  const RowWalk<dtype, vec, unroll> walk{row, vocab};

  // T, the k-th largest key; `above` keys exceed it and `ties` of the equal ones are admitted.
  u32 above, equal;
  const u32 t_key = detail::kth_largest(
      walk,
      [](int, float x, u32* key) {
        *key = detail::order_key(x);
        return true;
      },
      0u, 0xffffffffu, static_cast<u32>(k), sm, &above, &equal);
  const u32 ties = static_cast<u32>(k) - above;
  // The last admitted index among the keys equal to T: the ties-th smallest of their indices
  // (every one when all `equal` of them are admitted).
  int last = vocab - 1;
  if (equal > ties) {
    u32 unused, one;
    const u32 key = detail::kth_largest(
        walk,
        [&](int i, float x, u32* key2) {
          *key2 = static_cast<u32>(vocab - 1 - i);
          return detail::order_key(x) == t_key;
        },
        0u, static_cast<u32>(vocab - 1), ties, sm, &unused, &one);
    last = vocab - 1 - static_cast<int>(key);
  }

  // Exactly k candidates: every key above T, and the keys equal to T up to index `last`.
  if (threadIdx.x == 0) s_n = 0;
  __syncthreads();
  walk.run([&](int i, float x) {
    const u32 key = detail::order_key(x);
    if (key > t_key || (key == t_key && i <= last)) {
      const int slot = atomicAdd(&s_n, 1);
      s_key[slot] = key;
      s_idx[slot] = i;
    }
  });
  __syncthreads();

  dtype* values = static_cast<dtype*>(p.values) + r * p.values_stride;
  int* indices = p.indices + r * p.indices_stride;
  for (int j = int(threadIdx.x); j < k; j += int(blockDim.x)) {
    const u32 key = s_key[j];
    const int idx = s_idx[j];
    int rank = 0;
    for (int o = 0; o < k; ++o) {
      const u32 ok = s_key[o];
      rank += (ok > key || (ok == key && s_idx[o] < idx)) ? 1 : 0;
    }
    values[rank] = row[idx];  // the element itself: -0 stays -0, a NaN keeps its payload
    indices[rank] = idx;
  }
}

}  // namespace sampling
}  // namespace kjit
