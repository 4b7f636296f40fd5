// The radix search's counting steps over unsigned keys, shared by the samplers' threshold search
// (sampling.cuh) and kjit_top_k (top_k.cuh): key windows split into at most kBins bins in shared
// memory, the bin holding the n-th largest key, and a rank among a few keys.
#pragma once

#include "common/prelude.cuh"
#include "sampling/block.cuh"

namespace kjit {
namespace sampling {

constexpr int kBins = 2048;

namespace detail {

// Windows of keys are inclusive ranges [lo, hi] (u32: a window may be every key there is).

// Bin width (as a shift) that covers the window [lo, hi] with at most kBins bins.
KJIT_DEVICE KJIT_FORCEINLINE int fit_shift(u32 lo, u32 hi) {
  const int b = (32 - __clz(static_cast<int>(hi - lo))) - 11;
  return b > 0 ? b : 0;
}

KJIT_DEVICE KJIT_FORCEINLINE int bins_of(u32 lo, u32 hi, int s) {
  return static_cast<int>((hi - lo) >> s) + 1;
}

KJIT_DEVICE KJIT_FORCEINLINE void clear_bins(u32* a) {
  for (int i = int(threadIdx.x); i < kBins; i += int(blockDim.x)) a[i] = 0u;
}

// The bin holding the `need`-th largest key of the window (need >= 1 and at most the window's
// count): bin b with above(b) < need <= above(b) + cnt[b], where above(b) counts the window's
// keys in bins above b. Exact integer arithmetic, so exactly one thread finds it.
KJIT_DEVICE void find_count_bin(const u32* cnt, int nb, u32 need, u32* scratch, int* found,
                                int& bin, u32& above, u32& count) {
  const int per = (nb + int(blockDim.x) - 1) / int(blockDim.x);
  const int r0 = int(threadIdx.x) * per;
  const int r1 = r0 + per < nb ? r0 + per : nb;
  u32 local = 0;
  for (int r = r0; r < r1; ++r) local += cnt[nb - 1 - r];
  u32 total;
  u32 run = block_exclusive_scan<u32>(local, scratch, &total);
  for (int r = r0; r < r1; ++r) {
    const int b = nb - 1 - r;
    const u32 c = cnt[b];
    if (run < need && run + c >= need) {
      found[0] = b;
      found[1] = static_cast<int>(run);
      found[2] = static_cast<int>(c);
    }
    run += c;
  }
  __syncthreads();
  bin = found[0];
  above = static_cast<u32>(found[1]);
  count = static_cast<u32>(found[2]);
  __syncthreads();
}

// The rank of keys[i] among keys[0, n) in descending order, ties by index: unique, 0..n - 1.
KJIT_DEVICE KJIT_FORCEINLINE u32 rank_desc(const u32* keys, u32 n, u32 i) {
  const u32 key = keys[i];
  u32 r = 0;
  for (u32 j = 0; j < n; ++j) {
    const u32 o = keys[j];
    r += (o > key || (o == key && j < i)) ? 1u : 0u;
  }
  return r;
}

}  // namespace detail
}  // namespace sampling
}  // namespace kjit
