// Per-head QK RMSNorm fused with RoPE (Qwen3's q_norm / k_norm, then the rotary embedding, in
// place over the q and k heads of a fused qkv projection): specialization choice, spec rendering
// and launch (device code: kernels/rope/qk_norm_rope.cuh).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

#include "jit/spec.hpp"
#include "ops/pdl.hpp"
#include "ops/registry.hpp"

namespace kjit::ops {

// One compiled variant. Every field is in the URI; head counts are launch arguments.
struct QkNormRopeConfig {
  DType dtype = DType::kBF16;
  int head_dim = 0;
  int rot_dim = 0;
  int interleave = 0;  // 0 / 1: GPT-J pairs
  int vec = 1;         // elements per vector access
};

// Support and dispatch in one place (select_rope's vector: the weights are read with the same
// vectors). Throws KJIT_ERROR_UNSUPPORTED for a dtype or size no variant serves.
QkNormRopeConfig select_qk_norm_rope(DType dtype, int64_t head_dim, int64_t rot_dim,
                                     bool interleave, int align_bytes);

jit::Spec qk_norm_rope_spec(const QkNormRopeConfig& cfg);

// Validates, then launches on `stream` as `launch` says. Throws kjit::Error.
void qk_rmsnorm_rope(const DLTensor* q_weight, const DLTensor* k_weight, const DLTensor* pos_ids,
                     DLTensor* q, DLTensor* k, float eps, int rotary_dim, int interleave,
                     float rope_scale, float rope_theta, void* stream,
                     const ElementwiseLaunch& launch = elementwise_launch_from_env());

}  // namespace kjit::ops
