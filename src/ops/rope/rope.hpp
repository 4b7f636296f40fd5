// Rotary position embedding: specialization choice, spec rendering and launch (device code:
// kernels/rope/).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>

#include "jit/spec.hpp"
#include "ops/pdl.hpp"
#include "ops/registry.hpp"
#include "ops/tensor.hpp"

namespace kjit::ops {

// Angles from a frequency table at pos_ids[t] / from a cos-sin cache / from the frequency table
// at the position a request's indptr and offsets give (FlashInfer's apply_rope).
enum class RopeMode { kFreq, kCache, kIndptr };

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

// Which kernel and thread layout a call takes. kAuto is the library's choice by token count; the
// others force one, so the bench and the tests can time and check each side by side (kDecode only
// where rope_decode_supported, else as kAuto).
enum class RopeLayout { kAuto, kSlotMajor, kUnitMajor, kDecode };

// Overrides of the library's choices, for the bench and the tests; the C entry points take the
// defaults.
struct RopeTuning {
  RopeLayout layout = RopeLayout::kAuto;
};

// Threads one head takes (rope.cuh's kUnits).
int rope_units(const RopeConfig& cfg);

// Whether rope_decode_kernel serves this config's shape: a warp covers every unit of a head
// (units a power of two <= 32) and the angles split evenly over its lanes.
bool rope_decode_supported(const RopeConfig& cfg);

// Support and dispatch in one place. Throws KJIT_ERROR_UNSUPPORTED for a dtype or size no
// variant serves.
RopeConfig select_rope(RopeMode mode, DType dtype, int64_t head_dim, int64_t rot_dim,
                       bool interleave, int align_bytes);

// select_rope's config with the kernel and thread layout a call of `tokens` tokens takes;
// early_indices: the call's launch reads indices early (pdl_early_indices).
RopeConfig plan_rope(RopeConfig cfg, int64_t tokens, bool early_indices,
                     const RopeTuning& tuning = {});

jit::Spec rope_spec(const RopeConfig& cfg);
std::string rope_uri(const RopeConfig& cfg);

// Per-frequency inverse frequencies (inv_freq[f] for f < rot_dim / 2), computed in double.
// Plain: theta^(-2f/rot_dim) / scale. Llama 3.1: the same base, divided by `scale` in the low
// band, kept in the high band and blended linearly in between.
std::vector<double> rope_inv_freq(int rot_dim, double scale, double theta);
std::vector<double> llama31_inv_freq(int rot_dim, double scale, double theta,
                                     double low_freq_factor, double high_freq_factor,
                                     double old_context_len);

// Validate, then launch on `stream` as `launch` says. Throw kjit::Error.
void apply_rope_pos_ids(const DLTensor* q, const DLTensor* k, DLTensor* q_out, DLTensor* k_out,
                        const DLTensor* pos_ids, int rotary_dim, int interleave, float rope_scale,
                        float rope_theta, void* stream,
                        const ElementwiseLaunch& launch = elementwise_launch_from_env(),
                        const RopeTuning& tuning = {});
void apply_llama31_rope_pos_ids(const DLTensor* q, const DLTensor* k, DLTensor* q_out,
                                DLTensor* k_out, const DLTensor* pos_ids, int rotary_dim,
                                int interleave, float rope_scale, float rope_theta,
                                float low_freq_factor, float high_freq_factor,
                                float old_context_len, void* stream,
                                const ElementwiseLaunch& launch = elementwise_launch_from_env(),
                                const RopeTuning& tuning = {});
// FlashInfer's apply_rope / apply_llama31_rope: token t of request b (indptr[b] <= t <
// indptr[b + 1]) is at position offsets[b] + t - indptr[b].
void apply_rope_indptr(const DLTensor* q, const DLTensor* k, DLTensor* q_out, DLTensor* k_out,
                       const DLTensor* indptr, const DLTensor* offsets, int rotary_dim,
                       int interleave, float rope_scale, float rope_theta, void* stream,
                       const ElementwiseLaunch& launch = elementwise_launch_from_env(),
                       const RopeTuning& tuning = {});
void apply_llama31_rope_indptr(const DLTensor* q, const DLTensor* k, DLTensor* q_out,
                               DLTensor* k_out, const DLTensor* indptr, const DLTensor* offsets,
                               int rotary_dim, int interleave, float rope_scale, float rope_theta,
                               float low_freq_factor, float high_freq_factor, float old_context_len,
                               void* stream,
                               const ElementwiseLaunch& launch = elementwise_launch_from_env(),
                               const RopeTuning& tuning = {});
void apply_rope_with_cos_sin_cache(const DLTensor* positions, DLTensor* q, DLTensor* k,
                                   int head_size, const DLTensor* cos_sin_cache, int is_neox,
                                   void* stream,
                                   const ElementwiseLaunch& launch = elementwise_launch_from_env(),
                                   const RopeTuning& tuning = {});

}  // namespace kjit::ops
