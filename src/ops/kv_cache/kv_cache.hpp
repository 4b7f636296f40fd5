// Paged KV cache append: specialization choice, spec rendering and launch (device code:
// kernels/kv_cache/).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "jit/spec.hpp"
#include "ops/pdl.hpp"
#include "ops/registry.hpp"
#include "ops/tensor.hpp"

namespace kjit::kv_cache {
struct AppendPagedKvParams;
}

namespace kjit::ops {

// One compiled append variant. Every field is in the URI. The cache layout is not one: the
// kernel takes per-dim strides, so NHD and HND (and strided views) share the code.
struct AppendPagedKvConfig {
  DType dtype = DType::kBF16;
  int head_dim = 0;
  int vec = 1;  // elements per vector access
  // 0 / 1: the index chain read before the PDL wait (KJIT_PDL_EARLY_INDICES, at most
  // kAppendPagedKvEarlyMaxTokens tokens).
  int early_indices = 0;
  // 1: the caches hold float8 e4m3, written as e4m3(x / scale) (kjit_append_paged_kv_cache_fp8).
  int cache_fp8 = 0;
};

inline constexpr int kAppendPagedKvMaxHeadDim = 1024;
inline constexpr int kAppendPagedKvBlockThreads = 128;  // the kernel's launch bound is 256
// Up to this many tokens KJIT_PDL_EARLY_INDICES reads the index chain before the PDL wait; beyond,
// most blocks start after the kernel before has finished (nothing to overlap), and the data loads
// issued beside the index chain (the default) are the shorter path.
inline constexpr int64_t kAppendPagedKvEarlyMaxTokens = 256;

// Support and dispatch in one place. Throws KJIT_ERROR_UNSUPPORTED for a dtype or head size no
// variant serves. early_indices: the call's launch reads indices early (pdl_early_indices), which
// a call of at most kAppendPagedKvEarlyMaxTokens `tokens` then does. align_bytes: the alignment
// of the append tensors; cache_align_bytes that of the caches (e4m3 caches when cache_fp8).
AppendPagedKvConfig select_append_paged_kv(DType dtype, int64_t head_dim, int align_bytes,
                                           int64_t tokens = 0, bool early_indices = false,
                                           bool cache_fp8 = false, int cache_align_bytes = 16);

jit::Spec append_paged_kv_spec(const AppendPagedKvConfig& cfg);
std::string append_paged_kv_uri(const AppendPagedKvConfig& cfg);

// The fp8 caches' scales: fp32 on the device, one element (per tensor) or one per kv head. Both
// null for 16/32-bit caches.
struct AppendKvScales {
  const DLTensor* k_scale = nullptr;
  const DLTensor* v_scale = nullptr;
};

// Validates, then launches on `stream` as `launch` says. Throws kjit::Error. With scales the
// caches must be float8 e4m3; without, the append dtype.
void append_paged_kv_cache(const DLTensor* append_k, const DLTensor* append_v,
                           const DLTensor* batch_indices, const DLTensor* positions,
                           DLTensor* paged_k_cache, DLTensor* paged_v_cache,
                           const DLTensor* kv_indices, const DLTensor* kv_indptr,
                           const DLTensor* kv_last_page_len, int layout, void* stream,
                           const ElementwiseLaunch& launch = elementwise_launch_from_env(),
                           const AppendKvScales& scales = {});

// The destination of an append, shared with the fused RoPE + append (src/ops/rope/rope_append.cpp):
// the page table, the caches and (e4m3 caches) their scales, as views.
struct PagedKvTarget {
  StridedView batch_indices, positions, k_cache, v_cache, k_scale, v_scale;
  StridedView kv_indices, kv_indptr, kv_last_page_len;
  bool fp8 = false;  // e4m3 caches (scales given)
  bool nhd = true;
  int slot_dim = 1, head_dim_index = 2;  // the caches' dims of the page slot and the head
  int64_t num_pages = 0, page_size = 0, batch = 0;
};

// Validates the destination of the rows `rows` ([nnz, num_kv_heads, head_dim], named rows_name
// in messages: its device, and its dtype for 16/32-bit caches): everything
// kjit_append_paged_kv_cache(_fp8) checks about its page table, caches, layout (the argument
// layout_name) and scales.
PagedKvTarget check_paged_kv_target(const StridedView& rows, const char* rows_name,
                                    const DLTensor* batch_indices, const DLTensor* positions,
                                    DLTensor* paged_k_cache, DLTensor* paged_v_cache,
                                    const DLTensor* kv_indices, const DLTensor* kv_indptr,
                                    const DLTensor* kv_last_page_len, int layout,
                                    const char* layout_name, const AppendKvScales& scales);

// Fails unless each cache is writable and overlaps neither the other, nor the target's tables and
// scales, nor any of `inputs` (the call's other tensors, checked first, in order).
using NamedView = std::pair<const StridedView*, const char*>;
void check_caches_disjoint(const PagedKvTarget& t, std::initializer_list<NamedView> inputs);

// KJIT_ERROR_UNSUPPORTED (naming `op`) past the kernels' int32 rows, slots, pages or requests.
void check_paged_kv_sizes(const PagedKvTarget& t, int64_t rows, const char* op);

// The caches' byte alignment, at most 16.
int cache_alignment(const PagedKvTarget& t);

// The page table's, caches' and scales' fields of the append kernels' params.
void fill_paged_kv_params(const PagedKvTarget& t, kv_cache::AppendPagedKvParams* p);

}  // namespace kjit::ops
