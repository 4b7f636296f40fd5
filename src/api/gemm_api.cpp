// C entry points of the GEMM family.
#include <cstddef>

#include "api/entry.hpp"
#include "ops/gemm/gemm.hpp"
#include "util/error.hpp"

namespace {

// The fields of `o` that its struct_size covers, over the defaults: a caller built against an
// older, shorter kjit_gemm_options passes a smaller struct_size and gets defaults for the rest.
kjit_gemm_options read_options(const kjit_gemm_options* o) {
  kjit_gemm_options r;
  kjit_gemm_options_init(&r);
  if (o == nullptr) return r;
  if (o->struct_size < offsetof(kjit_gemm_options, alpha) + sizeof(float)) {
    kjit::fail(KJIT_ERROR_INVALID_ARGUMENT,
               "options->struct_size is {} (call kjit_gemm_options_init first)", o->struct_size);
  }
  r.alpha = o->alpha;
  if (o->struct_size >= offsetof(kjit_gemm_options, beta) + sizeof(float)) r.beta = o->beta;
  return r;
}

}  // namespace

extern "C" {

KJIT_API void kjit_gemm_options_init(kjit_gemm_options* options) {
  if (options == nullptr) return;
  *options = kjit_gemm_options{};
  options->struct_size = sizeof(kjit_gemm_options);
  options->alpha = 1.0f;
  options->beta = 0.0f;
}

KJIT_API kjit_status kjit_gemm(const DLTensor* a, const DLTensor* b, const DLTensor* bias,
                               DLTensor* out, const kjit_gemm_options* options, void* stream) {
  return kjit::api::entry<&kjit_gemm>(
      [&] {
        const kjit_gemm_options o = read_options(options);
        kjit::ops::gemm(a, b, bias, out, o.alpha, o.beta, stream);
      },
      a, b, bias, out, options, stream);
}

}  // extern "C"
