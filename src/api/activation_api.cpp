// C entry points of the activation family.
#include "api/guard.hpp"
#include "ops/activation/activation.hpp"

extern "C" {

KJIT_API kjit_status kjit_silu_and_mul(const DLTensor* input, DLTensor* out, void* stream) {
  return kjit::api::guarded(
      "kjit_silu_and_mul",
      [&](kjit::api::CallLog& log) { log.in("input", input).out("out", out).stream(stream); },
      [&] { kjit::ops::act_and_mul(kjit::ops::Act::kSilu, input, out, stream); });
}

KJIT_API kjit_status kjit_gelu_and_mul(const DLTensor* input, DLTensor* out, void* stream) {
  return kjit::api::guarded(
      "kjit_gelu_and_mul",
      [&](kjit::api::CallLog& log) { log.in("input", input).out("out", out).stream(stream); },
      [&] { kjit::ops::act_and_mul(kjit::ops::Act::kGelu, input, out, stream); });
}

KJIT_API kjit_status kjit_gelu_tanh_and_mul(const DLTensor* input, DLTensor* out, void* stream) {
  return kjit::api::guarded(
      "kjit_gelu_tanh_and_mul",
      [&](kjit::api::CallLog& log) { log.in("input", input).out("out", out).stream(stream); },
      [&] { kjit::ops::act_and_mul(kjit::ops::Act::kGeluTanh, input, out, stream); });
}

}  // extern "C"
