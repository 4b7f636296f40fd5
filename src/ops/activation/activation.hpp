// Gated MLP activations (silu / gelu / gelu_tanh and mul): specialization choice, spec rendering
// and launch (device code: kernels/activation/).
#pragma once

#include <dlpack/dlpack.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "activation/activation_params.h"
#include "jit/spec.hpp"
#include "ops/pdl.hpp"
#include "ops/registry.hpp"
#include "ops/tensor.hpp"

namespace kjit::ops {

// The activation applied to the gate half: an index into kActivations.
enum class Act { kSilu, kGelu, kGeluTanh, kSigmoid };

// One row per activation: what the ops, the registry's act axis and catalog, the definitions, the
// trace hook and `kjit-cli bench` know of it. A new activation is a row here, its functor in
// kernels/activation/act_and_mul.cuh and its C entry point (docs/add-an-op.md).
struct ActivationInfo {
  Act act;
  const char* name;     // URI token and `--set act=` value (no '_'): "gelutanh"
  const char* op_type;  // the definitions' op type; the C entry point is "kjit_" + op_type
  const char* formula;  // as the definitions write it: "out = gelu_tanh(gate) * up"
  // The kernel's ACT (kjit::activation::<functor>) and the reference's ActKind::k<functor>.
  const char* functor;
  double flops;  // per output element, the activation and the mul (the bench's FLOP count)
  // The intermediate sizes (d) `kjit-cli defs export` writes definitions for (0: none).
  std::array<int, 4> definition_d;
};
inline constexpr ActivationInfo kActivations[] = {
    {Act::kSilu, "silu", "silu_and_mul", "silu", "Silu", 5.0, {8192, 14336, 18944, 28672}},
    {Act::kGelu, "gelu", "gelu_and_mul", "gelu", "Gelu", 9.0, {}},
    {Act::kGeluTanh,
     "gelutanh",
     "gelu_tanh_and_mul",
     "gelu_tanh",
     "GeluTanh",
     9.0,
     {9216, 14336, 36864}},
    {Act::kSigmoid, "sigmoid", "sigmoid_and_mul", "sigmoid", "Sigmoid", 5.0, {14336}},
};

const ActivationInfo& activation_info(Act a);
// The row whose `name` this is; nullptr for none.
const ActivationInfo* find_activation(std::string_view name);
const char* act_name(Act a);  // activation_info(a).name

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
