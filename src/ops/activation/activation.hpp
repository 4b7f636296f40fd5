// Gated MLP activations (silu / gelu / gelu_tanh and mul): specialization choice, spec rendering
// and launch (device code: kernels/activation/).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

#include "activation/activation_params.h"
#include "jit/spec.hpp"
#include "ops/pdl.hpp"
#include "ops/registry.hpp"
#include "ops/tensor.hpp"

namespace kjit::ops {

// The activation applied to the gate half. The values are the kernel's ACT template argument.
enum class Act { kSilu = 0, kGelu = 1, kGeluTanh = 2 };

const char* act_name(Act a);  // "silu", "gelu", "gelutanh" (URI tokens: no '_')

// One compiled act-and-mul variant. Every field is in the URI; d is a run-time argument.
struct ActAndMulConfig {
  Act act = Act::kSilu;
  DType dtype = DType::kBF16;
  int vec = 1;  // elements per vector access (vec * sizeof(T) <= 16 bytes)
};

// The kernel's limits (kernels/activation/activation_params.h).
inline constexpr int64_t kActAndMulMaxD = activation::kActAndMulMaxD;
inline constexpr int kActAndMulThreads = activation::kActAndMulThreads;

// Support and dispatch in one place: the config for this activation, dtype, half width d and the
// alignment (bytes, power of two <= 16) that both pointers and both row strides share. Throws
// KJIT_ERROR_UNSUPPORTED for a dtype or d no variant serves.
ActAndMulConfig select_act_and_mul(Act act, DType dtype, int64_t d, int align_bytes);

// How a call is spread over the GPU: block (block_x, block_y) threads, grid (grid_x, grid_y).
// Pure, so the unit tests can check it without a device.
struct ActAndMulShape {
  unsigned grid_x = 1, grid_y = 1, block_x = 1, block_y = 1;
};
ActAndMulShape act_and_mul_shape(const ActAndMulConfig& cfg, int64_t rows, int64_t d, int sm_count,
                                 int max_threads_per_sm);

jit::Spec act_and_mul_spec(const ActAndMulConfig& cfg);
std::string act_and_mul_uri(const ActAndMulConfig& cfg);

// out = act(input[..., :d]) * input[..., d:]. Validates, then launches on `stream` as `launch`
// says. Throws kjit::Error.
void act_and_mul(Act act, const DLTensor* input, DLTensor* out, void* stream,
                 const ElementwiseLaunch& launch = elementwise_launch_from_env());

}  // namespace kjit::ops
