// Merging attention states (v, lse) over disjoint key sets: specialization choice, spec rendering
// and launch (device code: kernels/attention/merge_states.cuh).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

#include "jit/spec.hpp"
#include "ops/registry.hpp"
#include "ops/tensor.hpp"

namespace kjit::ops {

// One compiled merge variant (both entries: two states, n states). Every field is in the URI.
// The head size is a run-time value.
struct MergeStatesConfig {
  DType dtype = DType::kBF16;
  int vec = 1;               // elements per vector access
  int threads_per_row = 32;  // a power of two <= 32: rows never span warps
};

// The largest head size (dim) the merge kernels serve.
inline constexpr int64_t kMergeMaxDim = 1 << 16;

// Support and dispatch in one place. Throws KJIT_ERROR_UNSUPPORTED for a dtype no variant serves.
MergeStatesConfig select_merge_states(DType dtype, int64_t dim, int align_bytes);

jit::Spec merge_states_spec(const MergeStatesConfig& cfg);

// Validate, then launch on `stream`. Throw kjit::Error.
void merge_states(const DLTensor* v_a, const DLTensor* s_a, const DLTensor* v_b,
                  const DLTensor* s_b, DLTensor* v_out, DLTensor* s_out, void* stream);
void merge_states_n(const DLTensor* v, const DLTensor* s, DLTensor* v_out, DLTensor* s_out,
                    void* stream);

}  // namespace kjit::ops
