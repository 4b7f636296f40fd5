// Sampling: softmax, argmax, and the sorting-free top-k / top-p / min-p filters with sampling,
// renormalization or masking (device code: kernels/sampling/). Specialization choice, spec
// rendering and the op registry entries live in sampling.cpp; argument checks and launches of the
// public ops in sampling_ops.cpp.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

#include "jit/spec.hpp"
#include "ops/registry.hpp"
#include "ops/tensor.hpp"

namespace kjit::ops {

// What a filter kernel reads and what it produces.
enum class FilterInput : int { kProbs = 0, kLogits = 1, kLogitKeys = 2 };  // kLogitKeys: mask
enum class FilterOp : int { kSample = 0, kRenorm = 1, kMask = 2 };

// One compiled filter variant (kernels/sampling/sampling.cuh). Every field is in the URI; the
// vocabulary, the filters and their parameters are launch-time values.
struct FilterConfig {
  FilterOp op = FilterOp::kSample;
  FilterInput input = FilterInput::kProbs;
  DType dtype = DType::kF32;
  int vec = 1;     // elements per vector load (16 bytes, or 1)
  int unroll = 8;  // vector loads in flight per lane
};

// One compiled softmax or argmax variant.
struct RowConfig {
  DType dtype = DType::kF32;
  int vec = 1;
  int unroll = 8;
};

inline constexpr int64_t kFilterMaxVocab = 262144;      // 1024 segments of >= 256 elements
inline constexpr int64_t kRowKernelMaxVocab = 1 << 24;  // softmax / argmax

// Support and dispatch in one place. `vec_ok`: the vocabulary and every row pointer and stride
// allow 16-byte vectors. Throw KJIT_ERROR_UNSUPPORTED for a dtype or size no variant serves.
FilterConfig select_filter(FilterOp op, FilterInput input, DType dtype, int64_t vocab, bool vec_ok);
RowConfig select_softmax(DType dtype, int64_t vocab, bool vec_ok);
RowConfig select_argmax(DType dtype, int64_t vocab, bool vec_ok);

jit::Spec filter_spec(const FilterConfig& cfg);
std::string filter_uri(const FilterConfig& cfg);
jit::Spec softmax_spec(const RowConfig& cfg);
std::string softmax_uri(const RowConfig& cfg);
jit::Spec argmax_spec(const RowConfig& cfg);
std::string argmax_uri(const RowConfig& cfg);

// Threads per block for a row of `vocab` elements read `vec * unroll` per thread per step.
int sampling_block_threads(int64_t vocab, int vec, int unroll);

// A filter parameter: one value per row from a device tensor, or `scalar` for every row when
// `per_row` is NULL.
template <typename S>
struct RowParam {
  const DLTensor* per_row = nullptr;
  S scalar{};
};

// Validate, then launch on `stream`. Throw kjit::Error. The C entry points (kjit.h) document
// the arguments; seed and offset are device tensors so the launch never reads device memory.
void softmax(const DLTensor* logits, DLTensor* out, RowParam<float> temperature, void* stream);
void argmax(const DLTensor* input, DLTensor* out, void* stream);

struct SampleArgs {
  RowParam<int> top_k;
  RowParam<float> top_p;
  RowParam<float> min_p;
  RowParam<float> temperature;
  int filters = 0;  // kjit::sampling filter bits (1 top-k, 2 top-p, 4 min-p)
};
void sample(const char* input_name, FilterInput input, const DLTensor* x, const SampleArgs& args,
            const DLTensor* seed, const DLTensor* offset, DLTensor* samples, DLTensor* valid,
            void* stream);
void top_k_renorm_probs(const DLTensor* probs, RowParam<int> top_k, DLTensor* out, void* stream);
void top_p_renorm_probs(const DLTensor* probs, RowParam<float> top_p, DLTensor* out, void* stream);
void top_k_mask_logits(const DLTensor* logits, RowParam<int> top_k, DLTensor* out, void* stream);

inline constexpr int kFilterTopK = 1, kFilterTopP = 2, kFilterMinP = 4;

OpDef sampling_filter_op_def();
OpDef softmax_op_def();
OpDef argmax_op_def();

}  // namespace kjit::ops
