// Parameters and launch limits of the gated activation kernel (kernels/activation/
// act_and_mul.cuh), shared by NVRTC and the host op (src/ops/activation/): one definition, plain
// C types only. Strides are in elements. The struct's name and namespace are part of the kernel's
// mangled name: keep them.
#pragma once

namespace kjit {
namespace activation {

// Passed by value as the kernel's __grid_constant__ argument.
struct ActAndMulParams {
  const void* input;  // [rows, 2 * d] with row stride in_stride
  void* out;          // [rows, d] with row stride out_stride
  long long rows;
  long long in_stride;
  long long out_stride;
  int d;
};

// Threads per block at most. Small blocks give decode-sized calls (a few rows) more blocks, so
// they reach more SMs; 16 of them still fill an SM's 2048 threads for large calls.
constexpr int kActAndMulThreads = 128;

// Largest d (each half's width) the kernel's index arithmetic is sized for.
constexpr int kActAndMulMaxD = 1 << 24;

// Vectors a thread handles per step, all loaded before any is used: 64 bytes of input in flight
// per thread at 16-byte vectors, and more accesses (to at most 8) when the vectors are narrower.
// The host sizes the grid with it.
constexpr int act_and_mul_unroll(int vec_bytes) {
  return 32 / vec_bytes < 2 ? 2 : (32 / vec_bytes > 8 ? 8 : 32 / vec_bytes);
}

}  // namespace activation
}  // namespace kjit
