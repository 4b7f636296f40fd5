// RoPE fused with the paged KV append (FlashInfer's rope + append in one launch): specialization
// choice, spec rendering and launch (device code: kernels/rope/rope_append.cuh). The checks are
// kjit_apply_rope_pos_ids's for q / k and kjit_append_paged_kv_cache(_fp8)'s for the page table
// and caches (rope_detail.hpp, ops/kv_cache/kv_cache.hpp).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

#include "jit/spec.hpp"
#include "ops/kv_cache/kv_cache.hpp"
#include "ops/pdl.hpp"
#include "ops/registry.hpp"

namespace kjit::ops {

// One compiled variant. Every field is in the URI; the page size, the cache layout and the head
// counts are launch arguments.
struct RopeAppendConfig {
  DType dtype = DType::kBF16;  // q, k, v (and 16-bit caches)
  int head_dim = 0;
  int rot_dim = 0;
  int interleave = 0;  // 0 / 1: GPT-J pairs
  int vec = 1;         // elements per vector access
  int cache_fp8 = 0;   // 1: e4m3 caches, x / scale
};

// Support and dispatch in one place: select_rope's vector, narrowed to the caches' alignment
// (an e4m3 cache stores vec bytes per vector). Throws KJIT_ERROR_UNSUPPORTED for a dtype or size
// no variant serves.
RopeAppendConfig select_rope_append(DType dtype, int64_t head_dim, int64_t rot_dim, bool interleave,
                                    int align_bytes, bool cache_fp8, int cache_align_bytes);

jit::Spec rope_append_spec(const RopeAppendConfig& cfg);

// The RoPE scalars of the fused call (kjit_apply_rope_pos_ids's, with llama31 those of
// kjit_apply_llama31_rope_pos_ids).
struct RopeAppendRope {
  int rotary_dim = 0;  // 0: head_dim
  int interleave = 0;
  float rope_scale = 1.0f, rope_theta = 1e4f;
  bool llama31 = false;
  float low_freq_factor = 1.0f, high_freq_factor = 4.0f, old_context_len = 8192.0f;
};

// Validates, then launches on `stream` as `launch` says. Throws kjit::Error. With scales the
// caches are float8 e4m3; without, q's dtype.
void rope_append_paged_kv_cache(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                const DLTensor* pos_ids, const DLTensor* batch_indices,
                                const DLTensor* positions, const DLTensor* kv_indices,
                                const DLTensor* kv_indptr, const DLTensor* kv_last_page_len,
                                const AppendKvScales& scales, DLTensor* q_out,
                                DLTensor* paged_k_cache, DLTensor* paged_v_cache,
                                const RopeAppendRope& rope, int kv_layout, void* stream,
                                const ElementwiseLaunch& launch = elementwise_launch_from_env());

}  // namespace kjit::ops
