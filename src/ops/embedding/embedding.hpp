// Token-embedding gather (out[t, :] = table[ids[t], :]): specialization choice, spec rendering
// and launch (device code: kernels/embedding/).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

#include "embedding/embedding_params.h"
#include "jit/spec.hpp"
#include "ops/pdl.hpp"
#include "ops/tensor.hpp"

namespace kjit::ops {

// One compiled gather variant. Every field is in the URI; vocab, hidden and tokens are run-time
// arguments.
struct EmbeddingConfig {
  DType dtype = DType::kBF16;
  DType index = DType::kI32;  // the ids' dtype: int32 or int64
  int vec = 1;                // elements per vector access (vec * sizeof(dtype) <= 16 bytes)
};

inline constexpr int64_t kEmbeddingMaxHidden = embedding::kEmbeddingMaxHidden;

// Support and dispatch in one place: the config for this table dtype, id dtype, hidden size and
// the alignment (bytes, power of two <= 16) that table, out and both row strides share. Throws
// KJIT_ERROR_UNSUPPORTED for a dtype or hidden size no variant serves.
EmbeddingConfig select_embedding(DType dtype, DType index, int64_t hidden, int align_bytes);

jit::Spec embedding_spec(const EmbeddingConfig& cfg);
std::string embedding_uri(const EmbeddingConfig& cfg);

// out[t, :] = table[ids[t], :] (zeros for an id outside [0, vocab)). Validates, then launches on
// `stream` as `launch` says. Throws kjit::Error.
void embedding(const DLTensor* table, const DLTensor* ids, DLTensor* out, void* stream,
               const ElementwiseLaunch& launch = elementwise_launch_from_env());

}  // namespace kjit::ops
