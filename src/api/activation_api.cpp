// C entry points of the activation family.
#include "api/entry.hpp"
#include "ops/activation/activation.hpp"

extern "C" {

KJIT_API kjit_status kjit_silu_and_mul(const DLTensor* input, DLTensor* out, void* stream) {
  return kjit::api::entry<&kjit_silu_and_mul>(
      [&] { kjit::ops::act_and_mul(kjit::ops::Act::kSilu, input, out, stream); }, input, out,
      stream);
}

KJIT_API kjit_status kjit_gelu_and_mul(const DLTensor* input, DLTensor* out, void* stream) {
  return kjit::api::entry<&kjit_gelu_and_mul>(
      [&] { kjit::ops::act_and_mul(kjit::ops::Act::kGelu, input, out, stream); }, input, out,
      stream);
}

KJIT_API kjit_status kjit_gelu_tanh_and_mul(const DLTensor* input, DLTensor* out, void* stream) {
  return kjit::api::entry<&kjit_gelu_tanh_and_mul>(
      [&] { kjit::ops::act_and_mul(kjit::ops::Act::kGeluTanh, input, out, stream); }, input, out,
      stream);
}

KJIT_API kjit_status kjit_sigmoid_and_mul(const DLTensor* input, DLTensor* out, void* stream) {
  return kjit::api::entry<&kjit_sigmoid_and_mul>(
      [&] { kjit::ops::act_and_mul(kjit::ops::Act::kSigmoid, input, out, stream); }, input, out,
      stream);
}

}  // extern "C"
