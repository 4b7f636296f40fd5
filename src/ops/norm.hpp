// RMSNorm: specialization choice, spec rendering and launch (device code: kernels/norm/).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

#include "jit/spec.hpp"
#include "ops/registry.hpp"
#include "ops/tensor.hpp"

namespace kjit::ops {

// One compiled RMSNorm variant. Every field is in the URI.
struct RmsNormConfig {
  DType dtype = DType::kBF16;
  int hidden = 0;
  int vec = 1;               // elements per vector access (VEC*sizeof(T) <= 16 bytes)
  int threads_per_row = 32;  // 32 = warp per row; more = one row per block
  int rows_per_block = 1;
};

inline constexpr int64_t kRmsNormMaxHidden = 1 << 18;

// Support and dispatch in one place: the config for this dtype, hidden size and the alignment
// (bytes, power of two <= 16) that every pointer and row stride shares. Throws
// KJIT_ERROR_UNSUPPORTED for a dtype or hidden size no variant serves.
RmsNormConfig select_rmsnorm(DType dtype, int64_t hidden, int align_bytes);

jit::Spec rmsnorm_spec(const RmsNormConfig& cfg);
std::string rmsnorm_uri(const RmsNormConfig& cfg);

// Validates, then launches on `stream`. Throws kjit::Error.
void rmsnorm(const DLTensor* input, const DLTensor* weight, DLTensor* out, float eps, void* stream);

OpDef rmsnorm_op_def();

}  // namespace kjit::ops
