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

constexpr int kQuantThreads = 256;
constexpr int kQuantGroup = 128;  // elements per scale in per-group mode: one warp's 4 x 32

}  // namespace quant
}  // namespace kjit
