// C entry points of the sampling family.
#include "api/guard.hpp"
#include "ops/sampling/sampling.hpp"

namespace {

using kjit::api::CallLog;
using kjit::ops::FilterInput;
using kjit::ops::RowParam;
using kjit::ops::SampleArgs;

// The arguments every sampler shares, after its filter parameters.
void log_draw(CallLog& log, const DLTensor* seed, const DLTensor* offset, const DLTensor* samples,
              const DLTensor* valid) {
  log.in("seed", seed).in("offset", offset).out("samples", samples).out("valid", valid);
}

}  // namespace

extern "C" {

KJIT_API kjit_status kjit_sampling_from_probs(const DLTensor* probs, const DLTensor* seed,
                                              const DLTensor* offset, DLTensor* samples,
                                              DLTensor* valid, void* stream) {
  return kjit::api::guarded(
      "kjit_sampling_from_probs",
      [&](CallLog& log) {
        log.in("probs", probs);
        log_draw(log, seed, offset, samples, valid);
        log.stream(stream);
      },
      [&] {
        kjit::ops::sample("probs", FilterInput::kProbs, probs, SampleArgs{}, seed, offset, samples,
                          valid, stream);
      });
}

KJIT_API kjit_status kjit_top_k_sampling_from_probs(const DLTensor* probs,
                                                    const DLTensor* top_k_arr, const DLTensor* seed,
                                                    const DLTensor* offset, DLTensor* samples,
                                                    DLTensor* valid, int top_k, void* stream) {
  return kjit::api::guarded(
      "kjit_top_k_sampling_from_probs",
      [&](CallLog& log) {
        log.in("probs", probs).in("top_k_arr", top_k_arr);
        log_draw(log, seed, offset, samples, valid);
        log.scalar("top_k", top_k).stream(stream);
      },
      [&] {
        SampleArgs a;
        a.filters = kjit::ops::kFilterTopK;
        a.top_k = {top_k_arr, top_k};
        kjit::ops::sample("probs", FilterInput::kProbs, probs, a, seed, offset, samples, valid,
                          stream);
      });
}

KJIT_API kjit_status kjit_top_p_sampling_from_probs(const DLTensor* probs,
                                                    const DLTensor* top_p_arr, const DLTensor* seed,
                                                    const DLTensor* offset, DLTensor* samples,
                                                    DLTensor* valid, float top_p, void* stream) {
  return kjit::api::guarded(
      "kjit_top_p_sampling_from_probs",
      [&](CallLog& log) {
        log.in("probs", probs).in("top_p_arr", top_p_arr);
        log_draw(log, seed, offset, samples, valid);
        log.scalar("top_p", top_p).stream(stream);
      },
      [&] {
        SampleArgs a;
        a.filters = kjit::ops::kFilterTopP;
        a.top_p = {top_p_arr, top_p};
        kjit::ops::sample("probs", FilterInput::kProbs, probs, a, seed, offset, samples, valid,
                          stream);
      });
}

KJIT_API kjit_status kjit_min_p_sampling_from_probs(const DLTensor* probs,
                                                    const DLTensor* min_p_arr, const DLTensor* seed,
                                                    const DLTensor* offset, DLTensor* samples,
                                                    DLTensor* valid, float min_p, void* stream) {
  return kjit::api::guarded(
      "kjit_min_p_sampling_from_probs",
      [&](CallLog& log) {
        log.in("probs", probs).in("min_p_arr", min_p_arr);
        log_draw(log, seed, offset, samples, valid);
        log.scalar("min_p", min_p).stream(stream);
      },
      [&] {
        SampleArgs a;
        a.filters = kjit::ops::kFilterMinP;
        a.min_p = {min_p_arr, min_p};
        kjit::ops::sample("probs", FilterInput::kProbs, probs, a, seed, offset, samples, valid,
                          stream);
      });
}

KJIT_API kjit_status kjit_top_k_top_p_sampling_from_probs(
    const DLTensor* probs, const DLTensor* top_k_arr, const DLTensor* top_p_arr,
    const DLTensor* seed, const DLTensor* offset, DLTensor* samples, DLTensor* valid, int top_k,
    float top_p, void* stream) {
  return kjit::api::guarded(
      "kjit_top_k_top_p_sampling_from_probs",
      [&](CallLog& log) {
        log.in("probs", probs).in("top_k_arr", top_k_arr).in("top_p_arr", top_p_arr);
        log_draw(log, seed, offset, samples, valid);
        log.scalar("top_k", top_k).scalar("top_p", top_p).stream(stream);
      },
      [&] {
        SampleArgs a;
        a.filters = kjit::ops::kFilterTopK | kjit::ops::kFilterTopP;
        a.top_k = {top_k_arr, top_k};
        a.top_p = {top_p_arr, top_p};
        kjit::ops::sample("probs", FilterInput::kProbs, probs, a, seed, offset, samples, valid,
                          stream);
      });
}

KJIT_API kjit_status kjit_top_k_top_p_sampling_from_logits(
    const DLTensor* logits, const DLTensor* top_k_arr, const DLTensor* top_p_arr,
    const DLTensor* temperature_arr, const DLTensor* seed, const DLTensor* offset,
    DLTensor* samples, DLTensor* valid, int top_k, float top_p, float temperature, void* stream) {
  return kjit::api::guarded(
      "kjit_top_k_top_p_sampling_from_logits",
      [&](CallLog& log) {
        log.in("logits", logits).in("top_k_arr", top_k_arr).in("top_p_arr", top_p_arr);
        log.in("temperature_arr", temperature_arr);
        log_draw(log, seed, offset, samples, valid);
        log.scalar("top_k", top_k).scalar("top_p", top_p).scalar("temperature", temperature);
        log.stream(stream);
      },
      [&] {
        SampleArgs a;
        a.filters = kjit::ops::kFilterTopK | kjit::ops::kFilterTopP;
        a.top_k = {top_k_arr, top_k};
        a.top_p = {top_p_arr, top_p};
        a.temperature = {temperature_arr, temperature};
        kjit::ops::sample("logits", FilterInput::kLogits, logits, a, seed, offset, samples, valid,
                          stream);
      });
}

KJIT_API kjit_status kjit_top_k_renorm_probs(const DLTensor* probs, const DLTensor* top_k_arr,
                                             DLTensor* out, int top_k, void* stream) {
  return kjit::api::guarded(
      "kjit_top_k_renorm_probs",
      [&](CallLog& log) {
        log.in("probs", probs).in("top_k_arr", top_k_arr).out("out", out);
        log.scalar("top_k", top_k).stream(stream);
      },
      [&] {
        kjit::ops::top_k_renorm_probs(probs, RowParam<int>{top_k_arr, top_k}, out, stream);
      });
}

KJIT_API kjit_status kjit_top_p_renorm_probs(const DLTensor* probs, const DLTensor* top_p_arr,
                                             DLTensor* out, float top_p, void* stream) {
  return kjit::api::guarded(
      "kjit_top_p_renorm_probs",
      [&](CallLog& log) {
        log.in("probs", probs).in("top_p_arr", top_p_arr).out("out", out);
        log.scalar("top_p", top_p).stream(stream);
      },
      [&] {
        kjit::ops::top_p_renorm_probs(probs, RowParam<float>{top_p_arr, top_p}, out, stream);
      });
}

KJIT_API kjit_status kjit_top_k_mask_logits(const DLTensor* logits, const DLTensor* top_k_arr,
                                            DLTensor* out, int top_k, void* stream) {
  return kjit::api::guarded(
      "kjit_top_k_mask_logits",
      [&](CallLog& log) {
        log.in("logits", logits).in("top_k_arr", top_k_arr).out("out", out);
        log.scalar("top_k", top_k).stream(stream);
      },
      [&] {
        kjit::ops::top_k_mask_logits(logits, RowParam<int>{top_k_arr, top_k}, out, stream);
      });
}

KJIT_API kjit_status kjit_softmax(const DLTensor* logits, const DLTensor* temperature_arr,
                                  DLTensor* out, float temperature, void* stream) {
  return kjit::api::guarded(
      "kjit_softmax",
      [&](CallLog& log) {
        log.in("logits", logits).in("temperature_arr", temperature_arr).out("out", out);
        log.scalar("temperature", temperature).stream(stream);
      },
      [&] {
        kjit::ops::softmax(logits, out, RowParam<float>{temperature_arr, temperature}, stream);
      });
}

KJIT_API kjit_status kjit_argmax(const DLTensor* input, DLTensor* out, void* stream) {
  return kjit::api::guarded(
      "kjit_argmax", [&](CallLog& log) { log.in("input", input).out("out", out).stream(stream); },
      [&] { kjit::ops::argmax(input, out, stream); });
}

}  // extern "C"
