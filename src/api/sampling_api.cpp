// C entry points of the sampling family.
#include "api/entry.hpp"
#include "ops/sampling/sampling.hpp"

namespace {

using kjit::ops::FilterInput;
using kjit::ops::RowParam;
using kjit::ops::SampleArgs;

}  // namespace

extern "C" {

KJIT_API kjit_status kjit_sampling_from_probs(const DLTensor* probs, const DLTensor* seed,
                                              const DLTensor* offset, DLTensor* samples,
                                              DLTensor* valid, void* stream) {
  return kjit::api::entry<&kjit_sampling_from_probs>(
      [&] {
        kjit::ops::sample("probs", FilterInput::kProbs, probs, SampleArgs{}, seed, offset, samples,
                          valid, stream);
      },
      probs, seed, offset, samples, valid, stream);
}

KJIT_API kjit_status kjit_top_k_sampling_from_probs(const DLTensor* probs,
                                                    const DLTensor* top_k_arr, const DLTensor* seed,
                                                    const DLTensor* offset, DLTensor* samples,
                                                    DLTensor* valid, int top_k, void* stream) {
  return kjit::api::entry<&kjit_top_k_sampling_from_probs>(
      [&] {
        SampleArgs a;
        a.filters = kjit::ops::kFilterTopK;
        a.top_k = {top_k_arr, top_k};
        kjit::ops::sample("probs", FilterInput::kProbs, probs, a, seed, offset, samples, valid,
                          stream);
      },
      probs, top_k_arr, seed, offset, samples, valid, top_k, stream);
}

KJIT_API kjit_status kjit_top_p_sampling_from_probs(const DLTensor* probs,
                                                    const DLTensor* top_p_arr, const DLTensor* seed,
                                                    const DLTensor* offset, DLTensor* samples,
                                                    DLTensor* valid, float top_p, void* stream) {
  return kjit::api::entry<&kjit_top_p_sampling_from_probs>(
      [&] {
        SampleArgs a;
        a.filters = kjit::ops::kFilterTopP;
        a.top_p = {top_p_arr, top_p};
        kjit::ops::sample("probs", FilterInput::kProbs, probs, a, seed, offset, samples, valid,
                          stream);
      },
      probs, top_p_arr, seed, offset, samples, valid, top_p, stream);
}

KJIT_API kjit_status kjit_min_p_sampling_from_probs(const DLTensor* probs,
                                                    const DLTensor* min_p_arr, const DLTensor* seed,
                                                    const DLTensor* offset, DLTensor* samples,
                                                    DLTensor* valid, float min_p, void* stream) {
  return kjit::api::entry<&kjit_min_p_sampling_from_probs>(
      [&] {
        SampleArgs a;
        a.filters = kjit::ops::kFilterMinP;
        a.min_p = {min_p_arr, min_p};
        kjit::ops::sample("probs", FilterInput::kProbs, probs, a, seed, offset, samples, valid,
                          stream);
      },
      probs, min_p_arr, seed, offset, samples, valid, min_p, stream);
}

KJIT_API kjit_status kjit_top_k_top_p_sampling_from_probs(
    const DLTensor* probs, const DLTensor* top_k_arr, const DLTensor* top_p_arr,
    const DLTensor* seed, const DLTensor* offset, DLTensor* samples, DLTensor* valid, int top_k,
    float top_p, void* stream) {
  return kjit::api::entry<&kjit_top_k_top_p_sampling_from_probs>(
      [&] {
        SampleArgs a;
        a.filters = kjit::ops::kFilterTopK | kjit::ops::kFilterTopP;
        a.top_k = {top_k_arr, top_k};
        a.top_p = {top_p_arr, top_p};
        kjit::ops::sample("probs", FilterInput::kProbs, probs, a, seed, offset, samples, valid,
                          stream);
      },
      probs, top_k_arr, top_p_arr, seed, offset, samples, valid, top_k, top_p, stream);
}

KJIT_API kjit_status kjit_top_k_top_p_sampling_from_logits(
    const DLTensor* logits, const DLTensor* top_k_arr, const DLTensor* top_p_arr,
    const DLTensor* temperature_arr, const DLTensor* seed, const DLTensor* offset,
    DLTensor* samples, DLTensor* valid, int top_k, float top_p, float temperature, void* stream) {
  return kjit::api::entry<&kjit_top_k_top_p_sampling_from_logits>(
      [&] {
        SampleArgs a;
        a.filters = kjit::ops::kFilterTopK | kjit::ops::kFilterTopP;
        a.top_k = {top_k_arr, top_k};
        a.top_p = {top_p_arr, top_p};
        a.temperature = {temperature_arr, temperature};
        kjit::ops::sample("logits", FilterInput::kLogits, logits, a, seed, offset, samples, valid,
                          stream);
      },
      logits, top_k_arr, top_p_arr, temperature_arr, seed, offset, samples, valid, top_k, top_p,
      temperature, stream);
}

KJIT_API kjit_status kjit_top_k_renorm_probs(const DLTensor* probs, const DLTensor* top_k_arr,
                                             DLTensor* out, int top_k, void* stream) {
  return kjit::api::entry<&kjit_top_k_renorm_probs>(
      [&] {
        kjit::ops::top_k_renorm_probs(probs, RowParam<int>{top_k_arr, top_k}, out, stream);
      },
      probs, top_k_arr, out, top_k, stream);
}

KJIT_API kjit_status kjit_top_p_renorm_probs(const DLTensor* probs, const DLTensor* top_p_arr,
                                             DLTensor* out, float top_p, void* stream) {
  return kjit::api::entry<&kjit_top_p_renorm_probs>(
      [&] {
        kjit::ops::top_p_renorm_probs(probs, RowParam<float>{top_p_arr, top_p}, out, stream);
      },
      probs, top_p_arr, out, top_p, stream);
}

KJIT_API kjit_status kjit_top_k_mask_logits(const DLTensor* logits, const DLTensor* top_k_arr,
                                            DLTensor* out, int top_k, void* stream) {
  return kjit::api::entry<&kjit_top_k_mask_logits>(
      [&] {
        kjit::ops::top_k_mask_logits(logits, RowParam<int>{top_k_arr, top_k}, out, stream);
      },
      logits, top_k_arr, out, top_k, stream);
}

KJIT_API kjit_status kjit_softmax(const DLTensor* logits, const DLTensor* temperature_arr,
                                  DLTensor* out, float temperature, void* stream) {
  return kjit::api::entry<&kjit_softmax>(
      [&] {
        kjit::ops::softmax(logits, out, RowParam<float>{temperature_arr, temperature}, stream);
      },
      logits, temperature_arr, out, temperature, stream);
}

KJIT_API kjit_status kjit_argmax(const DLTensor* input, DLTensor* out, void* stream) {
  return kjit::api::entry<&kjit_argmax>([&] { kjit::ops::argmax(input, out, stream); }, input, out,
                                        stream);
}

}  // extern "C"
