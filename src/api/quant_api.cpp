// C entry points of the fp8 quantization family.
#include "api/entry.hpp"
#include "ops/quant/fused_quant_fp8.hpp"
#include "ops/quant/quant_fp8.hpp"
#include "util/error.hpp"

extern "C" {

KJIT_API kjit_status kjit_quant_fp8(const DLTensor* input, DLTensor* out, DLTensor* scale,
                                    kjit_fp8_scaling scaling, void* stream) {
  return kjit::api::entry<&kjit_quant_fp8>(
      [&] { kjit::ops::quant_fp8(input, out, scale, scaling, stream); }, input, out, scale, scaling,
      stream);
}

KJIT_API kjit_status kjit_rmsnorm_quant_fp8(const DLTensor* input, const DLTensor* weight,
                                            DLTensor* out, DLTensor* scale, float eps,
                                            void* stream) {
  return kjit::api::entry<&kjit_rmsnorm_quant_fp8>(
      [&] { kjit::ops::rmsnorm_quant_fp8(input, weight, nullptr, out, scale, eps, stream); }, input,
      weight, out, scale, eps, stream);
}

KJIT_API kjit_status kjit_fused_add_rmsnorm_quant_fp8(const DLTensor* input, const DLTensor* weight,
                                                      DLTensor* residual, DLTensor* out,
                                                      DLTensor* scale, float eps, void* stream) {
  return kjit::api::entry<&kjit_fused_add_rmsnorm_quant_fp8>(
      [&] {
        if (residual == nullptr) {
          kjit::fail(KJIT_ERROR_INVALID_ARGUMENT, "residual is NULL");
        }
        kjit::ops::rmsnorm_quant_fp8(input, weight, residual, out, scale, eps, stream);
      },
      input, weight, residual, out, scale, eps, stream);
}

KJIT_API kjit_status kjit_silu_and_mul_quant_fp8(const DLTensor* input, DLTensor* out,
                                                 DLTensor* scale, void* stream) {
  return kjit::api::entry<&kjit_silu_and_mul_quant_fp8>(
      [&] { kjit::ops::silu_and_mul_quant_fp8(input, out, scale, stream); }, input, out, scale,
      stream);
}

}  // extern "C"
