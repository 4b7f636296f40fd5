// C entry points of the sampling family.
#include <cstdint>

#include "api/entry.hpp"
#include "api/options.hpp"
#include "ops/sampling/sampling.hpp"
#include "ops/sampling/speculative.hpp"

namespace {

using kjit::ops::FilterInput;
using kjit::ops::RowParam;
using kjit::ops::SampleArgs;

// The per-row tensors of a sampler (NULL where it takes none or the caller gave none).
struct PerRow {
  const DLTensor* top_k = nullptr;
  const DLTensor* top_p = nullptr;
  const DLTensor* min_p = nullptr;
  const DLTensor* temperature = nullptr;
};

// The ops layer's arguments for the filters in `filters` (kjit::ops::kFilter* bits): each
// parameter's per-row tensor, else the options' value. The ops read temperature for logits only.
SampleArgs sample_args(int filters, const PerRow& arr, const kjit_sampling_options* options) {
  const kjit_sampling_options o = kjit::api::sampling_options(options);
  SampleArgs a;
  a.filters = filters;
  if (filters & kjit::ops::kFilterTopK) a.top_k = {arr.top_k, o.top_k};
  if (filters & kjit::ops::kFilterTopP) a.top_p = {arr.top_p, o.top_p};
  if (filters & kjit::ops::kFilterMinP) a.min_p = {arr.min_p, o.min_p};
  a.temperature = {arr.temperature, o.temperature};
  return a;
}

}  // namespace

extern "C" {

KJIT_API void kjit_sampling_options_init(kjit_sampling_options* options) {
  if (options == nullptr) return;
  *options = kjit_sampling_options{};
  options->struct_size = sizeof(kjit_sampling_options);
  options->top_k = INT32_MAX;  // any value >= vocab is off; this one is for every vocabulary
  options->top_p = 1.0f;
  options->min_p = 0.0f;
  options->temperature = 1.0f;
}

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

KJIT_API kjit_status kjit_top_k_sampling_from_probs(
    const DLTensor* probs, const DLTensor* top_k_arr, const DLTensor* seed, const DLTensor* offset,
    DLTensor* samples, DLTensor* valid, const kjit_sampling_options* options, void* stream) {
  return kjit::api::entry<&kjit_top_k_sampling_from_probs>(
      [&] {
        const SampleArgs a = sample_args(kjit::ops::kFilterTopK, {top_k_arr}, options);
        kjit::ops::sample("probs", FilterInput::kProbs, probs, a, seed, offset, samples, valid,
                          stream);
      },
      probs, top_k_arr, seed, offset, samples, valid, options, stream);
}

KJIT_API kjit_status kjit_top_p_sampling_from_probs(
    const DLTensor* probs, const DLTensor* top_p_arr, const DLTensor* seed, const DLTensor* offset,
    DLTensor* samples, DLTensor* valid, const kjit_sampling_options* options, void* stream) {
  return kjit::api::entry<&kjit_top_p_sampling_from_probs>(
      [&] {
        const SampleArgs a = sample_args(kjit::ops::kFilterTopP, {nullptr, top_p_arr}, options);
        kjit::ops::sample("probs", FilterInput::kProbs, probs, a, seed, offset, samples, valid,
                          stream);
      },
      probs, top_p_arr, seed, offset, samples, valid, options, stream);
}

KJIT_API kjit_status kjit_min_p_sampling_from_probs(
    const DLTensor* probs, const DLTensor* min_p_arr, const DLTensor* seed, const DLTensor* offset,
    DLTensor* samples, DLTensor* valid, const kjit_sampling_options* options, void* stream) {
  return kjit::api::entry<&kjit_min_p_sampling_from_probs>(
      [&] {
        const SampleArgs a =
            sample_args(kjit::ops::kFilterMinP, {nullptr, nullptr, min_p_arr}, options);
        kjit::ops::sample("probs", FilterInput::kProbs, probs, a, seed, offset, samples, valid,
                          stream);
      },
      probs, min_p_arr, seed, offset, samples, valid, options, stream);
}

KJIT_API kjit_status kjit_top_k_top_p_sampling_from_probs(
    const DLTensor* probs, const DLTensor* top_k_arr, const DLTensor* top_p_arr,
    const DLTensor* seed, const DLTensor* offset, DLTensor* samples, DLTensor* valid,
    const kjit_sampling_options* options, void* stream) {
  return kjit::api::entry<&kjit_top_k_top_p_sampling_from_probs>(
      [&] {
        const SampleArgs a = sample_args(kjit::ops::kFilterTopK | kjit::ops::kFilterTopP,
                                         {top_k_arr, top_p_arr}, options);
        kjit::ops::sample("probs", FilterInput::kProbs, probs, a, seed, offset, samples, valid,
                          stream);
      },
      probs, top_k_arr, top_p_arr, seed, offset, samples, valid, options, stream);
}

KJIT_API kjit_status kjit_top_k_top_p_sampling_from_logits(
    const DLTensor* logits, const DLTensor* top_k_arr, const DLTensor* top_p_arr,
    const DLTensor* temperature_arr, const DLTensor* seed, const DLTensor* offset,
    DLTensor* samples, DLTensor* valid, const kjit_sampling_options* options, void* stream) {
  return kjit::api::entry<&kjit_top_k_top_p_sampling_from_logits>(
      [&] {
        const SampleArgs a = sample_args(kjit::ops::kFilterTopK | kjit::ops::kFilterTopP,
                                         {top_k_arr, top_p_arr, nullptr, temperature_arr}, options);
        kjit::ops::sample("logits", FilterInput::kLogits, logits, a, seed, offset, samples, valid,
                          stream);
      },
      logits, top_k_arr, top_p_arr, temperature_arr, seed, offset, samples, valid, options, stream);
}

KJIT_API kjit_status kjit_top_k_renorm_probs(const DLTensor* probs, const DLTensor* top_k_arr,
                                             DLTensor* out, const kjit_sampling_options* options,
                                             void* stream) {
  return kjit::api::entry<&kjit_top_k_renorm_probs>(
      [&] {
        const int top_k = kjit::api::sampling_options(options).top_k;
        kjit::ops::top_k_renorm_probs(probs, RowParam<int>{top_k_arr, top_k}, out, stream);
      },
      probs, top_k_arr, out, options, stream);
}

KJIT_API kjit_status kjit_top_p_renorm_probs(const DLTensor* probs, const DLTensor* top_p_arr,
                                             DLTensor* out, const kjit_sampling_options* options,
                                             void* stream) {
  return kjit::api::entry<&kjit_top_p_renorm_probs>(
      [&] {
        const float top_p = kjit::api::sampling_options(options).top_p;
        kjit::ops::top_p_renorm_probs(probs, RowParam<float>{top_p_arr, top_p}, out, stream);
      },
      probs, top_p_arr, out, options, stream);
}

KJIT_API kjit_status kjit_top_k_mask_logits(const DLTensor* logits, const DLTensor* top_k_arr,
                                            DLTensor* out, const kjit_sampling_options* options,
                                            void* stream) {
  return kjit::api::entry<&kjit_top_k_mask_logits>(
      [&] {
        const int top_k = kjit::api::sampling_options(options).top_k;
        kjit::ops::top_k_mask_logits(logits, RowParam<int>{top_k_arr, top_k}, out, stream);
      },
      logits, top_k_arr, out, options, stream);
}

KJIT_API kjit_status kjit_softmax(const DLTensor* logits, const DLTensor* temperature_arr,
                                  DLTensor* out, const kjit_sampling_options* options,
                                  void* stream) {
  return kjit::api::entry<&kjit_softmax>(
      [&] {
        const float temperature = kjit::api::sampling_options(options).temperature;
        kjit::ops::softmax(logits, out, RowParam<float>{temperature_arr, temperature}, stream);
      },
      logits, temperature_arr, out, options, stream);
}

KJIT_API kjit_status kjit_argmax(const DLTensor* input, DLTensor* out, void* stream) {
  return kjit::api::entry<&kjit_argmax>([&] { kjit::ops::argmax(input, out, stream); }, input, out,
                                        stream);
}

KJIT_API kjit_status kjit_chain_speculative_sampling(const DLTensor* draft_probs,
                                                     const DLTensor* draft_token_ids,
                                                     const DLTensor* target_probs,
                                                     const DLTensor* seed, const DLTensor* offset,
                                                     DLTensor* output_token_ids, DLTensor* accepted,
                                                     DLTensor* emitted, void* stream) {
  return kjit::api::entry<&kjit_chain_speculative_sampling>(
      [&] {
        kjit::ops::chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, seed,
                                              offset, output_token_ids, accepted, emitted, stream);
      },
      draft_probs, draft_token_ids, target_probs, seed, offset, output_token_ids, accepted, emitted,
      stream);
}

KJIT_API kjit_status kjit_top_k(const DLTensor* input, DLTensor* values, DLTensor* indices, int k,
                                void* stream) {
  return kjit::api::entry<&kjit_top_k>([&] { kjit::ops::top_k(input, values, indices, k, stream); },
                                       input, values, indices, k, stream);
}

}  // extern "C"
