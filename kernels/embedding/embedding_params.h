// Parameters and launch limits of the token-embedding gather (kernels/embedding/embedding.cuh),
// shared by NVRTC and the host op (src/ops/embedding/): one definition, plain C types only.
// Strides are in elements. The struct's name and namespace are part of the kernel's mangled name:
// keep them.
#pragma once

namespace kjit {
namespace embedding {

// Passed by value as the kernel's __grid_constant__ argument.
struct EmbeddingParams {
  const void* table;  // [vocab, hidden] with row stride table_stride
  const void* ids;    // [tokens], int32 or int64, contiguous
  void* out;          // [tokens, hidden] with row stride out_stride
  long long tokens;
  long long vocab;
  long long table_stride;
  long long out_stride;
  int hidden;
};

// Threads per block at most: as the gated activations, small blocks give a decode step's few
// rows more blocks, so they reach more SMs.
constexpr int kEmbeddingThreads = 128;

// Largest hidden size the kernel's int vector indices are sized for.
constexpr int kEmbeddingMaxHidden = 1 << 24;

}  // namespace embedding
}  // namespace kjit
