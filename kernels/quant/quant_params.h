// Parameters of the fp8 quantization kernels (kernels/quant/quant_fp8.cuh), shared by NVRTC and
// the host op (src/ops/quant/). Plain C types only; strides in elements.
#pragma once

namespace kjit {
namespace quant {

// Passed by value as the kernels' __grid_constant__ argument.
struct QuantFp8Params {
  const void* in;  // [rows, cols] bf16 / fp16, row stride in_stride
  void* out;       // [rows, cols] e4m3, row stride out_stride
  float* scale;    // [1], [rows] or [rows, groups], compact
  long long rows, cols;
  long long in_stride, out_stride;
  long long groups;  // ceil(cols / kQuantGroup): a row's scales in per-group mode
};

// rmsnorm_quant_fp8_kernel (kernels/quant/fused_quant_fp8.cuh): one row per block.
struct RmsNormQuantFp8Params {
  const void* input;   // [rows, hidden], row stride in_stride
  const void* weight;  // [hidden]
  void* residual;      // [rows, hidden], row stride res_stride; null without the residual add
  void* out;           // [rows, hidden] e4m3, row stride out_stride
  float* scale;        // [rows]
  long long rows, hidden;
  long long in_stride, res_stride, out_stride;
  float eps;
};

// silu_and_mul_quant_fp8_kernel (kernels/quant/fused_quant_fp8.cuh): one warp per group.
struct ActQuantFp8Params {
  const void* input;  // [rows, 2 d] ([gate | up]), row stride in_stride
  void* out;          // [rows, d] e4m3, row stride out_stride
  float* scale;       // [rows, groups], compact
  long long rows, d;
  long long in_stride, out_stride;
  long long groups;  // ceil(d / kQuantGroup)
};

constexpr int kQuantThreads = 256;
constexpr int kQuantGroup = 128;  // elements per scale in per-group mode: one warp's 4 x 32

}  // namespace quant
}  // namespace kjit
