// Parameters of the paged KV append kernel (kernels/kv_cache/append_paged.cuh), shared by NVRTC
// and the host op (src/ops/kv_cache/): one definition, plain C types only. The struct's name and
// namespace are part of the kernel's mangled name: keep them.
#pragma once

#include "common/fastdiv_params.h"

namespace kjit {
namespace kv_cache {

// Passed by value as the kernel's __grid_constant__ argument. Strides in elements. Cache strides
// are per logical dim (page, slot, head), so the NHD and HND layouts (and strided views of a
// combined [pages, 2, ...] cache) are one kernel.
struct AppendPagedKvParams {
  const void* append_k;  // [nnz, num_heads, HEAD_DIM]
  const void* append_v;
  const int* batch_indices;  // [nnz]
  const int* positions;      // [nnz]
  void* k_cache;
  void* v_cache;
  const int* kv_indices;                 // [nnz_pages]
  const int* kv_indptr;                  // [batch + 1]
  long long ak_st, ak_sh, av_st, av_sh;  // append: token, head strides
  long long kc_sp, kc_ss, kc_sh;         // k cache: page, slot, head strides
  long long vc_sp, vc_ss, vc_sh;
  long long num_pages;
  int rows;  // nnz * num_heads
  int num_heads;
  int page_size;
  int batch;
  int nnz_pages;
  FastDiv heads_div;      // row / num_heads
  FastDiv page_size_div;  // pos / page_size
  // fp8 caches only (null otherwise): element h * scale_head_stride is kv head h's scale
  // (stride 0: one scale for the tensor). Last, so the other kernels' code is unchanged.
  const float* k_scale;
  const float* v_scale;
  int scale_head_stride;
};

}  // namespace kv_cache
}  // namespace kjit
