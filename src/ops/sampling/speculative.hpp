// Chain speculative sampling (device code: kernels/sampling/speculative.cuh): support, spec and
// the validated launch behind kjit_chain_speculative_sampling.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

#include "jit/spec.hpp"

namespace kjit::ops {

// The one compiled variant's settings (every field is in the URI).
struct SpeculativeConfig {
  int threads = 1024;
};

inline constexpr int kSpeculativeMaxDraft = 31;  // the kernel's kMaxDraftTokens

jit::Spec chain_speculative_spec(const SpeculativeConfig& cfg);

// Validates, then launches on `stream`. accepted and emitted may be null. Throws kjit::Error.
void chain_speculative_sampling(const DLTensor* draft_probs, const DLTensor* draft_token_ids,
                                const DLTensor* target_probs, const DLTensor* seed,
                                const DLTensor* offset, DLTensor* output_token_ids,
                                DLTensor* accepted, DLTensor* emitted, void* stream);

}  // namespace kjit::ops
