// C entry points of the fp8 quantization family.
#include "api/entry.hpp"
#include "ops/quant/quant_fp8.hpp"

extern "C" {

KJIT_API kjit_status kjit_quant_fp8(const DLTensor* input, DLTensor* out, DLTensor* scale,
                                    kjit_fp8_scaling scaling, void* stream) {
  return kjit::api::entry<&kjit_quant_fp8>(
      [&] { kjit::ops::quant_fp8(input, out, scale, scaling, stream); }, input, out, scale, scaling,
      stream);
}

}  // extern "C"
