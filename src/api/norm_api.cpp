// C entry points of the normalization family.
#include "api/guard.hpp"
#include "ops/norm.hpp"

extern "C" {

KJIT_API kjit_status kjit_rmsnorm(const DLTensor* input, const DLTensor* weight, DLTensor* out,
                                  float eps, void* stream) {
  return kjit::api::guarded("kjit_rmsnorm",
                            [&] { kjit::ops::rmsnorm(input, weight, out, eps, stream); });
}

}  // extern "C"
