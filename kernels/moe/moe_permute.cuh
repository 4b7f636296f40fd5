// Token permutation for the experts and its inverse (kernels/moe/moe_params.h).
//
// moe_sort_kernel: a stable counting sort of the pairs (t, j) -> topk_ids[t, j] by expert, in one
// block: a histogram, the offsets (an exclusive scan; ids outside [0, experts) form a last bucket
// past expert_offsets[experts]), then the pairs in chunks of kMoeSortThreads in pair order: each
// warp ranks its pairs per bucket (__match_any_sync), a per-warp table turns that into a place
// after every earlier pair of the bucket. Pair order is (token, slot) order, so each expert's
// rows are in token order.
// moe_permute_copy_kernel: permuted row d = x[permuted_to_src[d] / top_k], one block per row.
// moe_finalize_kernel: out[t] = sum_j topk_weights[t, j] * expert_out[src_to_permuted[t, j]]
// (+ shared_out[t]), summed in fp32 in slot order; slots whose src_to_permuted is -1 (or outside
// expert_out) add nothing.
//
// Launch contracts: sort: 1 block of kMoeSortThreads, experts + 1 <= BUCKETS (a multiple of 32
// up to kMoeMaxPermuteExperts: the table's width), pairs < 2^31. copy: pairs blocks of
// kMoeCopyThreads after sort on the same stream; VEC elements per access (the host checks the rows'
// alignment). finalize: tokens blocks of kMoeFinalizeThreads. No dynamic shared memory.
#pragma once

#include "common/prelude.cuh"
#include "common/vec.cuh"
#include "moe/moe_params.h"

namespace kjit {
namespace moe {

constexpr int kSortWarps = kMoeSortThreads / 32;

KJIT_DEVICE KJIT_FORCEINLINE int bucket_of(const MoePermuteParams& p, i64 pair) {
  const int id = p.topk_ids[pair];
  return id >= 0 && id < p.experts ? id : p.experts;
}

// cursor[b] = the first place of bucket b; expert_offsets written. Every thread calls it.
template <int BUCKETS>
KJIT_DEVICE KJIT_FORCEINLINE void bucket_offsets(const MoePermuteParams& p, int* cursor) {
  constexpr int kPerLane = BUCKETS / 32;
  const int buckets = p.experts + 1;
  for (int b = threadIdx.x; b < buckets; b += kMoeSortThreads) cursor[b] = 0;
  __syncthreads();
  for (i64 i = threadIdx.x; i < p.pairs; i += kMoeSortThreads)
    atomicAdd(&cursor[bucket_of(p, i)], 1);
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = static_cast<int>(threadIdx.x);
    int local[kPerLane];
    int run = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int b = lane * kPerLane + j;
      local[j] = b < buckets ? cursor[b] : 0;
      run += local[j];
    }
    int before = run;  // inclusive scan over lanes, then made exclusive
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int o = __shfl_up_sync(0xffffffffu, before, offset);
      if (lane >= offset) before += o;
    }
    before -= run;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int b = lane * kPerLane + j;
      if (b < buckets) {
        cursor[b] = before;
        p.expert_offsets[b] = before;  // offsets[experts]: the end of the valid pairs
      }
      before += local[j];
    }
  }
  __syncthreads();
}

template <int BUCKETS>
__global__ void __launch_bounds__(kMoeSortThreads)
    moe_sort_kernel(const __grid_constant__ MoePermuteParams p) {
  static_assert(BUCKETS % 32 == 0 && BUCKETS <= kMoeMaxPermuteExperts, "buckets: 32 .. 512");
  __shared__ int cursor[BUCKETS];
  __shared__ int table[kSortWarps][BUCKETS];
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int buckets = p.experts + 1;
  bucket_offsets<BUCKETS>(p, cursor);
  for (i64 base = 0; base < p.pairs; base += kMoeSortThreads) {
    for (int i = threadIdx.x; i < kSortWarps * buckets; i += kMoeSortThreads) {
      table[i / buckets][i % buckets] = 0;
    }
    __syncthreads();
    const i64 pair = base + threadIdx.x;
    const bool live = pair < p.pairs;
    // Dead lanes share one bucket that no live lane has.
    const int bucket = live ? bucket_of(p, pair) : BUCKETS;
    const u32 peers = __match_any_sync(0xffffffffu, bucket);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    if (live && rank == 0) table[warp][bucket] = __popc(peers);
    __syncthreads();
    // Each bucket's count per warp becomes the place of the warp's first pair of it.
    for (int b = threadIdx.x; b < buckets; b += kMoeSortThreads) {
      int run = cursor[b];
      for (int w = 0; w < kSortWarps; ++w) {
        const int c = table[w][b];
        table[w][b] = run;
        run += c;
      }
      cursor[b] = run;
    }
    __syncthreads();
    if (live) {
      const int dst = table[warp][bucket] + rank;
      p.permuted_to_src[dst] = static_cast<int>(pair);
      p.src_to_permuted[pair] = bucket < p.experts ? dst : -1;
    }
    __syncthreads();  // the table is cleared for the next chunk
  }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kMoeCopyThreads)
    moe_permute_copy_kernel(const __grid_constant__ MoePermuteParams p) {
  const i64 d = blockIdx.x;
  const i64 t = p.permuted_to_src[d] / p.top_k;
  const T* src = static_cast<const T*>(p.x) + t * p.x_stride;
  T* dst = static_cast<T*>(p.permuted) + d * p.permuted_stride;
  for (i64 c = i64(threadIdx.x) * VEC; c < p.hidden; c += i64(kMoeCopyThreads) * VEC) {
    Vec<T, VEC> v;
    v.load(src + c);
    v.store(dst + c);
  }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kMoeFinalizeThreads)
    moe_finalize_kernel(const __grid_constant__ MoeFinalizeParams p) {
  const i64 t = blockIdx.x;
  const T* rows[kMoeMaxTopK];
  float w[kMoeMaxTopK];
#pragma unroll
  for (int j = 0; j < kMoeMaxTopK; ++j) {
    const int r = j < p.top_k ? p.src_to_permuted[t * p.top_k + j] : -1;
    const bool in = r >= 0 && r < p.expert_rows;
    rows[j] = in ? static_cast<const T*>(p.expert_out) + i64(r) * p.expert_stride : nullptr;
    w[j] = in ? p.topk_weights[t * p.top_k + j] : 0.0f;
  }
  const T* shared =
      p.shared_out != nullptr ? static_cast<const T*>(p.shared_out) + t * p.shared_stride : nullptr;
  T* out = static_cast<T*>(p.out) + t * p.out_stride;
  for (i64 c = i64(threadIdx.x) * VEC; c < p.hidden; c += i64(kMoeFinalizeThreads) * VEC) {
    float acc[VEC];
#pragma unroll
    for (int v = 0; v < VEC; ++v) acc[v] = 0.0f;
#pragma unroll
    for (int j = 0; j < kMoeMaxTopK; ++j) {
      if (rows[j] == nullptr) continue;
      Vec<T, VEC> x;
      x.load(rows[j] + c);
#pragma unroll
      for (int v = 0; v < VEC; ++v) acc[v] = fmaf(w[j], to_float(x[v]), acc[v]);
    }
    if (shared != nullptr) {
      Vec<T, VEC> s;
      s.load(shared + c);
#pragma unroll
      for (int v = 0; v < VEC; ++v) acc[v] += to_float(s[v]);
    }
    Vec<T, VEC> o;
#pragma unroll
    for (int v = 0; v < VEC; ++v) o[v] = from_float<T>(acc[v]);
    o.store(out + c);
  }
}

}  // namespace moe
}  // namespace kjit
