// Parameters of the RoPE kernels (kernels/rope/rope.cuh), shared by NVRTC and the host op
// (src/ops/rope/): one definition, plain C types only. Strides are in elements. The names and
// namespace are part of the kernels' mangled names: keep them.
#pragma once

#include "common/fastdiv_params.h"

namespace kjit {
namespace rope {

// Where the angles come from: the kernels' MODE template argument.
constexpr int kModeFreq = 0;   // a = pos * inv_freq[f], the table in RopeParams::freq
constexpr int kModeCache = 1;  // cos(a) = cache[pos][f], sin(a) = cache[pos][ROT_DIM / 2 + f]
// As kModeFreq, with each token's position found from its request (FlashInfer's apply_rope):
// offsets[b] + t - indptr[b] for the b with indptr[b] <= t < indptr[b + 1].
constexpr int kModeIndptr = 2;

// cos_sin cache element types (RopeArgs::cache_dtype).
constexpr int kCacheF32 = 0;
constexpr int kCacheF16 = 1;
constexpr int kCacheBF16 = 2;

// Everything but the frequency table.
struct RopeArgs {
  const void* q_in;     // [tokens, q_heads, HEAD_DIM]
  void* q_out;          // may be q_in (same strides): in place
  const void* k_in;     // [tokens, k_heads, HEAD_DIM]
  void* k_out;          // may be k_in (same strides): in place
  const void* pos;      // [tokens], int32 or int64 (pos_bytes); kModeIndptr: offsets [batch]
  const void* cos_sin;  // kModeCache: [max_pos, ROT_DIM], row stride cache_stride
  long long q_in_st, q_in_sh, q_out_st, q_out_sh;
  long long k_in_st, k_in_sh, k_out_st, k_out_sh;
  long long cache_stride;
  long long max_pos;
  int q_heads, k_heads;
  int heads_per_chunk;  // heads of one token that one block covers
  int chunks;           // blocks per token: grid = tokens * chunks
  int copy_q_pass;      // 1 when q_out is not q_in: dims >= ROT_DIM must be copied
  int copy_k_pass;
  int pos_bytes;       // 4 or 8
  int cache_dtype;     // kCache*
  FastDiv chunks_div;  // blockIdx.x / chunks
  FastDiv slots_div;   // threadIdx.x / slots (slots = blockDim.x / kUnits)
  const void* indptr;  // kModeIndptr: [batch + 1], pos's dtype
  int batch;           // kModeIndptr: requests, >= 1
};

// Passed by value as the kernels' __grid_constant__ argument: the args and, for kModeFreq,
// (hi, lo) of inv_freq[f] / pi for f < TABLE = ROT_DIM / 2. The host fills the largest table
// (TABLE = 256) and the launch copies only the kernel's own parameter size, so a kernel's table
// is as long as its ROT_DIM needs.
template <int TABLE>
struct RopeParams {
  RopeArgs a;
  float freq[2 * TABLE];
};

}  // namespace rope
}  // namespace kjit
