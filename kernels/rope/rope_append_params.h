// Parameters of the fused RoPE + paged KV append kernel (kernels/rope/rope_append.cuh), shared by
// NVRTC and the host op (src/ops/rope/rope_append.cpp): the RoPE kernels' arguments and the
// append kernel's, one definition each. The names and namespace are part of the kernel's mangled
// name: keep them.
#pragma once

#include "kv_cache/kv_cache_params.h"
#include "rope/rope_params.h"

namespace kjit {
namespace rope {

// Passed by value as the kernel's __grid_constant__ argument.
//  - rope: q_in / q_out, k_in (k_out unused: k goes to the cache), pos (pos_ids), their strides,
//    q_heads, k_heads (the kv heads), and the grid: heads_per_chunk of the token's
//    q_heads + 2 * k_heads heads (q, then k, then v) per block, chunks blocks per token.
//  - kv: append_v (append_k unused: it is rope.k_in), the page table, the caches, their strides
//    and the e4m3 scales, as kjit_append_paged_kv_cache fills them.
//  - freq: (hi, lo) of inv_freq[f] / pi, f < TABLE = ROT_DIM / 2, as RopeParams.
template <int TABLE>
struct RopeAppendParams {
  RopeArgs rope;
  kv_cache::AppendPagedKvParams kv;
  float freq[2 * TABLE];
};

}  // namespace rope
}  // namespace kjit
