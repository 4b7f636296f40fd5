// Parameters of kjit_top_k's kernel (kernels/sampling/top_k.cuh), shared by NVRTC and the host op
// (src/ops/sampling/top_k.cpp): one definition, plain C types only. Strides are in elements.
#pragma once

namespace kjit {
namespace sampling {

// The largest k top_k_kernel serves: its candidates sit in shared memory.
constexpr int kTopKMax = 1024;

struct TopKParams {
  const void* input;  // [rows, vocab], the kernel's dtype
  void* values;       // [rows, k], the input's dtype
  int* indices;       // [rows, k]
  long long in_stride, values_stride, indices_stride;
  int vocab;
  int k;  // 1..min(vocab, kTopKMax)
};

}  // namespace sampling
}  // namespace kjit
