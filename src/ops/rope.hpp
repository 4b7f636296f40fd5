// Rotary position embedding: specialization choice, spec rendering and launch (device code:
// kernels/rope/). Also home of StridedView, the n-d view check that the rope and paged-KV ops
// share (their tensors are [tokens, heads, dim] views whose token and head strides are free).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>

#include "jit/spec.hpp"
#include "ops/registry.hpp"
#include "ops/tensor.hpp"

namespace kjit::ops {

// ---- Strided views ------------------------------------------------------------------------------

// A tensor with its shape and element strides as given (compact when DLPack's strides is NULL).
struct StridedView {
  char* data = nullptr;  // data + byte_offset
  DType dtype = DType::kF32;
  int device = 0;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // elements
  int64_t numel() const;
  size_t elem_bytes() const { return dtype_size(dtype); }
};

// Checks what as_row_matrix checks, except that any non-negative strides are accepted: NULL,
// ndim, shape, lanes, dtype, device, data, a last dim with a stride other than 1, negative
// strides, a data pointer not aligned to its element size, and an extent that overflows.
// Throws KJIT_ERROR_INVALID_ARGUMENT naming `name`.
StridedView as_strided_view(const DLTensor* t, const char* name);

// True when two distinct indices of `v` address one element (it must not be written then).
bool self_overlaps(const StridedView& v);
// The same elements in the same order (the in-place case).
bool same_view(const StridedView& a, const StridedView& b);
// True when the views may share a byte. Exact for disjoint address ranges and for views whose
// outermost dims have one stride and whose rows fall in disjoint slices of it (q and k of a
// fused qkv, k and v of a [pages, 2, ...] cache); conservatively true otherwise.
bool views_overlap(const StridedView& a, const StridedView& b);
// The widest power of two (<= 16) dividing the address and the byte stride of every dim but the
// last one that has more than one element.
int view_alignment(const StridedView& v);
// Throws KJIT_ERROR_INVALID_ARGUMENT unless b has a's dtype and device (messages name both).
void check_same_dtype_device(const StridedView& a, const char* an, const StridedView& b,
                             const char* bn);

// ---- RoPE
// -----------------------------------------------------------------------------------------

enum class RopeMode { kFreq, kCache };  // angles from a frequency table / from a cos-sin cache

// One compiled RoPE variant. Every field is in the URI.
struct RopeConfig {
  RopeMode mode = RopeMode::kFreq;
  DType dtype = DType::kBF16;
  int head_dim = 0;
  int rot_dim = 0;
  int interleave = 0;  // 0 / 1; int, not bool, so the config has no padding (see kernel_for)
  int vec = 1;         // elements per vector access
  int unit_major = 0;  // 0 / 1: thread layout (rope.cuh); launch_rope picks 1 at decode sizes
  // 0 / 1: rope_decode_kernel (warp-shared angles, set-up before the PDL wait); launch_rope picks
  // it at decode sizes where rope_decode_supported. unit_major is then 0.
  int decode = 0;
  // 0 / 1: with decode, the position (and the cache row) read before the PDL wait
  // (KJIT_PDL_EARLY_INDICES).
  int early_pos = 0;
};

inline constexpr int kRopeMaxHeadDim = 1024;
inline constexpr int kRopeMaxRotDim = 512;
inline constexpr int kRopeBlockThreads = 128;  // the kernel's launch bound is 256
// Up to this many tokens a call takes the decode kernel where rope_decode_supported (both
// modes), else, for a frequency-table call (pos_ids, llama31), the unit-major thread layout
// (latency: one or two table addresses per warp); beyond it slot-major (bandwidth).
inline constexpr int64_t kRopeUnitMajorMaxTokens = 128;

// Bench hook (not in the C ABI): 0 picks the layout by token count, 1 forces slot-major, 2
// unit-major, 3 the decode kernel (where rope_decode_supported; else as 0), so each can be timed
// and tested side by side. Process-wide.
void set_rope_layout(int layout);
int rope_layout();

// Whether rope_decode_kernel serves this config's shape: a warp covers every unit of a head
// (units a power of two <= 32) and the angles split evenly over its lanes.
bool rope_decode_supported(const RopeConfig& cfg);

// Support and dispatch in one place. Throws KJIT_ERROR_UNSUPPORTED for a dtype or size no
// variant serves.
RopeConfig select_rope(RopeMode mode, DType dtype, int64_t head_dim, int64_t rot_dim,
                       bool interleave, int align_bytes);

jit::Spec rope_spec(const RopeConfig& cfg);
std::string rope_uri(const RopeConfig& cfg);

// Per-frequency inverse frequencies (inv_freq[f] for f < rot_dim / 2), computed in double.
// Plain: theta^(-2f/rot_dim) / scale. Llama 3.1: the same base, divided by `scale` in the low
// band, kept in the high band and blended linearly in between.
std::vector<double> rope_inv_freq(int rot_dim, double scale, double theta);
std::vector<double> llama31_inv_freq(int rot_dim, double scale, double theta,
                                     double low_freq_factor, double high_freq_factor,
                                     double old_context_len);

// Validate, then launch on `stream`. Throw kjit::Error.
void apply_rope_pos_ids(const DLTensor* q, const DLTensor* k, DLTensor* q_out, DLTensor* k_out,
                        const DLTensor* pos_ids, int rotary_dim, int interleave, float rope_scale,
                        float rope_theta, void* stream);
void apply_llama31_rope_pos_ids(const DLTensor* q, const DLTensor* k, DLTensor* q_out,
                                DLTensor* k_out, const DLTensor* pos_ids, int rotary_dim,
                                int interleave, float rope_scale, float rope_theta,
                                float low_freq_factor, float high_freq_factor,
                                float old_context_len, void* stream);
void apply_rope_with_cos_sin_cache(const DLTensor* positions, DLTensor* q, DLTensor* k,
                                   int head_size, const DLTensor* cos_sin_cache, int is_neox,
                                   void* stream);

OpDef rope_op_def();

}  // namespace kjit::ops
