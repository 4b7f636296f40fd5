// C entry points of the normalization family.
#include "api/guard.hpp"
#include "ops/norm/layernorm.hpp"
#include "ops/norm/norm.hpp"

extern "C" {

KJIT_API kjit_status kjit_rmsnorm(const DLTensor* input, const DLTensor* weight, DLTensor* out,
                                  float eps, void* stream) {
  return kjit::api::guarded(
      "kjit_rmsnorm",
      [&](kjit::api::CallLog& log) {
        log.in("input", input).in("weight", weight).out("out", out).scalar("eps", eps);
        log.stream(stream);
      },
      [&] { kjit::ops::rmsnorm(input, weight, out, eps, stream); });
}

KJIT_API kjit_status kjit_fused_add_rmsnorm(DLTensor* input, DLTensor* residual,
                                            const DLTensor* weight, float eps, void* stream) {
  return kjit::api::guarded(
      "kjit_fused_add_rmsnorm",
      [&](kjit::api::CallLog& log) {
        log.inout("input", input).inout("residual", residual).in("weight", weight);
        log.scalar("eps", eps).stream(stream);
      },
      [&] { kjit::ops::fused_add_rmsnorm(input, residual, weight, eps, stream); });
}

KJIT_API kjit_status kjit_gemma_rmsnorm(const DLTensor* input, const DLTensor* weight,
                                        DLTensor* out, float eps, void* stream) {
  return kjit::api::guarded(
      "kjit_gemma_rmsnorm",
      [&](kjit::api::CallLog& log) {
        log.in("input", input).in("weight", weight).out("out", out).scalar("eps", eps);
        log.stream(stream);
      },
      [&] { kjit::ops::rmsnorm(input, weight, out, eps, stream, 1.0f); });
}

KJIT_API kjit_status kjit_gemma_fused_add_rmsnorm(DLTensor* input, DLTensor* residual,
                                                  const DLTensor* weight, float eps, void* stream) {
  return kjit::api::guarded(
      "kjit_gemma_fused_add_rmsnorm",
      [&](kjit::api::CallLog& log) {
        log.inout("input", input).inout("residual", residual).in("weight", weight);
        log.scalar("eps", eps).stream(stream);
      },
      [&] { kjit::ops::fused_add_rmsnorm(input, residual, weight, eps, stream, 1.0f); });
}

KJIT_API kjit_status kjit_layernorm(const DLTensor* input, const DLTensor* gamma,
                                    const DLTensor* beta, DLTensor* out, float eps, void* stream) {
  return kjit::api::guarded(
      "kjit_layernorm",
      [&](kjit::api::CallLog& log) {
        log.in("input", input).in("gamma", gamma).in("beta", beta).out("out", out);
        log.scalar("eps", eps).stream(stream);
      },
      [&] { kjit::ops::layernorm(input, gamma, beta, out, eps, stream); });
}

}  // extern "C"
