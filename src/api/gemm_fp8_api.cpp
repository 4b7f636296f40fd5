// C entry point of the fp8 GEMM (its options are kjit_gemm's: gemm_api.cpp).
#include "api/entry.hpp"
#include "api/options.hpp"
#include "ops/gemm/gemm_fp8.hpp"

extern "C" {

KJIT_API kjit_status kjit_gemm_fp8(const DLTensor* a, const DLTensor* b, const DLTensor* scale_a,
                                   const DLTensor* scale_b, DLTensor* out,
                                   const kjit_gemm_options* options, void* stream) {
  return kjit::api::entry<&kjit_gemm_fp8>(
      [&] {
        const kjit_gemm_options o = kjit::api::gemm_options(options);
        kjit::ops::GemmFp8Tuning tuning;
        tuning.weights_early = o.weights_early != 0;
        kjit::ops::gemm_fp8(a, b, scale_a, scale_b, out, o.alpha, o.beta, stream, tuning);
      },
      a, b, scale_a, scale_b, out, options, stream);
}

}  // extern "C"
