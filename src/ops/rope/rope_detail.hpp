// The RoPE ops' argument checks, frequency table and launch geometry (defined in rope.cpp),
// shared with the fused RoPE + paged KV append (rope_append.cpp) so that both validate and rotate
// the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ops/pdl.hpp"
#include "ops/rope/rope.hpp"
#include "ops/tensor.hpp"
#include "rope/rope_params.h"

namespace kjit::ops::rope_detail {

// The host fills the table at its largest; the launch copies only the kernel's own parameter
// size (kernels/rope/rope_params.h).
using RopeParams = rope::RopeParams<kRopeMaxRotDim / 2>;

// q, k and their outputs as [tokens, heads, head_dim] views, checked against each other.
struct QkViews {
  StridedView q, k, q_out, k_out;
  int64_t tokens = 0, q_heads = 0, k_heads = 0, head_dim = 0;
};

void check_ndim3(const StridedView& v, const char* name, const char* what);
void check_same_shape(const StridedView& a, const char* an, const StridedView& b, const char* bn);
// An output must be its own input exactly (in place, when may_be_same) or share no byte with
// `other`.
void check_no_alias(const StridedView& out, const char* on, const StridedView& other,
                    const char* other_name, bool may_be_same);
void check_writable(const StridedView& v, const char* name);
// pos_ids / positions: [tokens] int32 or int64 on q's device.
StridedView positions_view(const DLTensor* t, const char* name, int64_t tokens,
                           const StridedView& q);
void check_positive_finite(float x, const char* name);
// KJIT_ERROR_UNSUPPORTED for a q / k dtype or head_dim no RoPE kernel serves.
void check_supported(DType dtype, int64_t head_dim);
// rotary_dim 0 means head_dim; else even, 2..head_dim.
int resolve_rotary_dim(int rotary_dim, int64_t head_dim, const char* name);
void check_flag(int v, const char* name);

// Everything the launch needs beyond the views.
struct RopeLaunch {
  RopeMode mode = RopeMode::kFreq;
  bool interleave = false;
  int rot_dim = 0;
  const StridedView* pos = nullptr;                // kIndptr: the offsets
  const StridedView* indptr = nullptr;             // kIndptr
  const StridedView* cache = nullptr;              // kCache
  const std::vector<float>* freq_pairs = nullptr;  // kFreq: see freq_pairs()
  const ElementwiseLaunch* launch = nullptr;
  const RopeTuning* tuning = nullptr;
};

// What determines a frequency table: the entry point and its scalars, compared bit for bit.
struct FreqKey {
  int rot_dim = 0;
  int llama31 = 0;
  float scale = 0, theta = 0, low = 0, high = 0, old_ctx = 0;
  bool operator==(const FreqKey& o) const;
};

// inv_freq[f] / pi as (hi, lo) float pairs, memoized per thread by key (inv_freq computes the
// table the first time).
const std::vector<float>& freq_pairs(const FreqKey& key,
                                     const std::function<std::vector<double>()>& inv_freq);

// How a call spreads over the GPU: head slots per block, blocks per token and the heads a block
// covers, for h_total heads per token.
struct RopeGrid {
  int slots = 1;
  int64_t chunks = 1, heads_per_chunk = 1;
};
RopeGrid rope_grid(const RopeConfig& cfg, int64_t tokens, int64_t h_total, int sm_count);

// The kernels' params for the views, the launch and the grid.
RopeParams rope_params(const QkViews& v, const RopeLaunch& l, const RopeGrid& g);

// The frequency table keys of kjit_apply_rope_pos_ids and kjit_apply_llama31_rope_pos_ids, their
// scalars checked (llama31_key: low / high factors and old_context_len; the caller checks scale
// and theta).
FreqKey plain_key(int rot, float rope_scale, float rope_theta);
FreqKey llama31_key(int rot, float rope_scale, float rope_theta, float low_freq_factor,
                    float high_freq_factor, float old_context_len);

// The RoPE half of a fused kernel's params and its launch shape: the views' strides, pos, the
// frequency table `key` names (plain_key, llama31_key), and the grid
// over h_total heads per token with the thread geometry of (dtype, head_dim, rot_dim, interleave,
// vec) on `device`.
struct FusedRope {
  RopeParams params;
  unsigned grid = 0, block = 0;
};
FusedRope fused_rope(const QkViews& v, const StridedView& pos, DType dtype, int head_dim,
                     int rot_dim, int interleave, int vec, const FreqKey& key, int64_t h_total,
                     int device);

// Launches a fused kernel with f's grid and block and its full params (which begin with f's)
// on `stream`, as `launch` says.
void launch_fused(const FusedRope& f, CUfunction fn, const void* params, void* stream, int device,
                  const ElementwiseLaunch& launch);

}  // namespace kjit::ops::rope_detail
