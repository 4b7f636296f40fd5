// Where a token lands in a paged KV cache, and how a row is stored there: shared by the append
// kernel (kv_cache/append_paged.cuh) and the fused RoPE + append (rope/rope_append.cuh), so both
// follow kjit_append_paged_kv_cache's addressing, skip rules and e4m3 rounding.
#pragma once

#include "common/fastdiv.cuh"
#include "common/fp8.cuh"
#include "common/prelude.cuh"
#include "common/vec.cuh"
#include "kv_cache/kv_cache_params.h"

namespace kjit {
namespace kv_cache {

// The cache element: the append dtype, or an e4m3 byte.
template <typename DTYPE, bool CACHE_FP8>
struct CacheElement {
  using type = DTYPE;
};
template <typename DTYPE>
struct CacheElement<DTYPE, true> {
  using type = u8;
};

// e4m3(x / scale) of each element as kjit_quant_fp8 computes it (a true division, so the CPU
// reference agrees bit for bit; a scale that is not > 0 stores zeros).
template <typename T, int N>
KJIT_DEVICE KJIT_FORCEINLINE Vec<u8, N> quantize_e4m3(const Vec<T, N>& x, float scale) {
  Vec<u8, N> q;
#pragma unroll
  for (int e = 0; e < N; ++e) q[e] = e4m3_bits(scale > 0.0f ? to_float(x[e]) / scale : 0.0f);
  return q;
}

// Stores one vector of a row: as it is, or quantized with the row's scale (e4m3 caches).
template <bool CACHE_FP8, typename T, int N>
KJIT_DEVICE KJIT_FORCEINLINE void store_cache_vec(typename CacheElement<T, CACHE_FP8>::type* dst,
                                                  const Vec<T, N>& x, float scale) {
  if constexpr (CACHE_FP8) {
    quantize_e4m3(x, scale).store(dst);
  } else {
    x.store(dst);
  }
}

// The page and slot of position pos (>= 0) of the request whose pages are kv_indices[first, end):
// false (the token is skipped) when the page slot falls outside [first, end) or kv_indices, or the
// page id outside [0, num_pages). load_index reads kv_indices (a plain or a read-only-path load).
template <typename LoadIndex>
KJIT_DEVICE KJIT_FORCEINLINE bool page_slot(const AppendPagedKvParams& p, int pos, int first,
                                            int end, LoadIndex load_index, int* page, int* slot) {
  const int page_in_seq = fast_div(pos, p.page_size_div);
  const long long slot_index = (long long)first + page_in_seq;
  if (first < 0 || slot_index >= end || slot_index >= p.nnz_pages) return false;
  *page = load_index(p.kv_indices + slot_index);
  if (*page < 0 || *page >= p.num_pages) return false;
  *slot = pos - page_in_seq * p.page_size;
  return true;
}

// The whole chain for token t, with read-only-path loads: batch index, position, the request's
// page range, its page. Also false for a request index outside [0, batch) or a negative
// position.
KJIT_DEVICE KJIT_FORCEINLINE bool token_page_slot(const AppendPagedKvParams& p, int t, int* page,
                                                  int* slot) {
  const int b = __ldg(p.batch_indices + t);
  const int pos = __ldg(p.positions + t);
  if (b < 0 || b >= p.batch || pos < 0) return false;
  return page_slot(
      p, pos, __ldg(p.kv_indptr + b), __ldg(p.kv_indptr + b + 1),
      [](const int* q) { return __ldg(q); }, page, slot);
}

}  // namespace kv_cache
}  // namespace kjit
