// Parameters of the normalisation kernels (kernels/norm/*.cuh), each passed by value as the
// kernel's one __grid_constant__ argument. The host ops (src/ops/norm/) fill these same structs:
// this header is the one definition both NVRTC and the host compiler include, so it holds plain
// C types only (pointers, long long, int, float) and nothing either side lacks. Strides are in
// elements. The names and namespace are part of the kernels' mangled names: keep them.
#pragma once

namespace kjit {
namespace norm {

// rmsnorm_kernel (kernels/norm/rmsnorm.cuh).
struct RmsNormParams {
  const void* input;   // [rows, HIDDEN] with row stride in_stride
  const void* weight;  // [HIDDEN]
  void* out;           // [rows, HIDDEN] with row stride out_stride
  long long rows;
  long long in_stride;
  long long out_stride;
  float eps;
  float weight_offset;  // 0 for RMSNorm; 1 for Gemma-style (weight + 1). Applied as (w + offset).
};

// fused_add_rmsnorm_kernel (kernels/norm/fused_add_rmsnorm.cuh).
struct FusedAddRmsNormParams {
  void* input;         // [rows, HIDDEN], row stride in_stride: read, then overwritten by the norm
  void* residual;      // [rows, HIDDEN], row stride res_stride: read, then overwritten by the sum
  const void* weight;  // [HIDDEN]
  long long rows;
  long long in_stride;
  long long res_stride;
  float eps;
  float weight_offset;  // 0 for RMSNorm; 1 for Gemma-style (weight + 1)
};

// layernorm_kernel (kernels/norm/layernorm.cuh).
struct LayerNormParams {
  const void* input;  // [rows, HIDDEN] with row stride in_stride, DTYPE
  const void* gamma;  // [HIDDEN], PARAM_DTYPE
  const void* beta;   // [HIDDEN], PARAM_DTYPE
  void* out;          // [rows, HIDDEN] with row stride out_stride, DTYPE
  long long rows;
  long long in_stride;
  long long out_stride;
  float eps;
};

}  // namespace norm
}  // namespace kjit
