// C entry points of the GEMM family.
#include "api/entry.hpp"
#include "api/options.hpp"
#include "ops/gemm/gemm.hpp"

extern "C" {

KJIT_API void kjit_gemm_options_init(kjit_gemm_options* options) {
  if (options == nullptr) return;
  *options = kjit_gemm_options{};
  options->struct_size = sizeof(kjit_gemm_options);
  options->alpha = 1.0f;
  options->beta = 0.0f;
  options->autotune = -1;
  options->tune_timing = KJIT_TUNE_EAGER_COLD;
}

KJIT_API kjit_status kjit_gemm(const DLTensor* a, const DLTensor* b, const DLTensor* bias,
                               DLTensor* out, const kjit_gemm_options* options, void* stream) {
  return kjit::api::entry<&kjit_gemm>(
      [&] {
        const kjit_gemm_options o = kjit::api::gemm_options(options);
        kjit::ops::GemmTuning tuning;
        tuning.tune = kjit::tune::tune_request(o.autotune, o.tune_timing);
        tuning.weights_early = o.weights_early != 0;
        kjit::ops::gemm(a, b, bias, out, o.alpha, o.beta, stream, tuning);
      },
      a, b, bias, out, options, stream);
}

}  // extern "C"
