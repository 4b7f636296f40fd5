// LayerNorm: specialization choice, spec rendering and launch (device code:
// kernels/norm/layernorm.cuh).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

#include "jit/spec.hpp"
#include "ops/norm/norm.hpp"  // kNormEarlyParamsMaxRows, kNormManyRows, NormTuning
#include "ops/registry.hpp"
#include "ops/tensor.hpp"

namespace kjit::ops {

// One compiled LayerNorm variant. Every field is in the URI.
struct LayerNormConfig {
  DType dtype = DType::kBF16;        // input / out
  DType param_dtype = DType::kBF16;  // gamma / beta: dtype, or fp32 beside bf16 / fp16
  int hidden = 0;
  int vec = 1;  // activation elements per vector access (VEC*sizeof(T) <= 16 bytes)
  int threads_per_row = 32;
  int rows_per_block = 1;
  int early_params = 0;  // 1: gamma / beta read before the PDL wait (rows <= 256; see norm.hpp)
};

inline constexpr int64_t kLayerNormMaxHidden = 1 << 18;

// Support and dispatch in one place. align_bytes is what input, out and their row strides share;
// param_align_bytes what gamma and beta share (powers of two <= 16); rows the call's row count.
// Throws KJIT_ERROR_UNSUPPORTED for a dtype pair or hidden size no variant serves.
LayerNormConfig select_layernorm(DType dtype, DType param_dtype, int64_t hidden, int align_bytes,
                                 int param_align_bytes, int64_t rows = kNormManyRows,
                                 const NormTuning& tuning = {});

jit::Spec layernorm_spec(const LayerNormConfig& cfg);
std::string layernorm_uri(const LayerNormConfig& cfg);

// Validates, then launches on `stream` as `launch` says. Throws kjit::Error.
void layernorm(const DLTensor* input, const DLTensor* gamma, const DLTensor* beta, DLTensor* out,
               float eps, void* stream,
               const ElementwiseLaunch& launch = elementwise_launch_from_env(),
               const NormTuning& tuning = {});

}  // namespace kjit::ops
