// C entry points of the normalization family.
#include "api/entry.hpp"
#include "ops/norm/layernorm.hpp"
#include "ops/norm/norm.hpp"

extern "C" {

KJIT_API kjit_status kjit_rmsnorm(const DLTensor* input, const DLTensor* weight, DLTensor* out,
                                  float eps, void* stream) {
  return kjit::api::entry<&kjit_rmsnorm>(
      [&] { kjit::ops::rmsnorm(input, weight, out, eps, stream); }, input, weight, out, eps,
      stream);
}

KJIT_API kjit_status kjit_fused_add_rmsnorm(const DLTensor* weight, DLTensor* input,
                                            DLTensor* residual, float eps, void* stream) {
  return kjit::api::entry<&kjit_fused_add_rmsnorm>(
      [&] { kjit::ops::fused_add_rmsnorm(input, residual, weight, eps, stream); }, weight, input,
      residual, eps, stream);
}

KJIT_API kjit_status kjit_gemma_rmsnorm(const DLTensor* input, const DLTensor* weight,
                                        DLTensor* out, float eps, void* stream) {
  return kjit::api::entry<&kjit_gemma_rmsnorm>(
      [&] { kjit::ops::rmsnorm(input, weight, out, eps, stream, 1.0f); }, input, weight, out, eps,
      stream);
}

KJIT_API kjit_status kjit_gemma_fused_add_rmsnorm(const DLTensor* weight, DLTensor* input,
                                                  DLTensor* residual, float eps, void* stream) {
  return kjit::api::entry<&kjit_gemma_fused_add_rmsnorm>(
      [&] { kjit::ops::fused_add_rmsnorm(input, residual, weight, eps, stream, 1.0f); }, weight,
      input, residual, eps, stream);
}

KJIT_API kjit_status kjit_layernorm(const DLTensor* input, const DLTensor* gamma,
                                    const DLTensor* beta, DLTensor* out, float eps, void* stream) {
  return kjit::api::entry<&kjit_layernorm>(
      [&] { kjit::ops::layernorm(input, gamma, beta, out, eps, stream); }, input, gamma, beta, out,
      eps, stream);
}

}  // extern "C"
