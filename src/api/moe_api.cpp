// C entry points of the mixture-of-experts family.
#include <optional>

#include "api/entry.hpp"
#include "api/options.hpp"
#include "ops/moe/moe.hpp"
#include "util/error.hpp"

extern "C" {

KJIT_API void kjit_moe_route_options_init(kjit_moe_route_options* options) {
  if (options == nullptr) return;
  *options = kjit_moe_route_options{};
  options->struct_size = sizeof(kjit_moe_route_options);
  options->scoring = KJIT_MOE_SCORING_SOFTMAX;
  options->renormalize = 0;
  options->n_group = 1;
  options->topk_group = 1;
  options->routed_scaling_factor = 1.0f;
}

KJIT_API kjit_status kjit_moe_route(const DLTensor* logits, const DLTensor* bias,
                                    DLTensor* topk_ids, DLTensor* topk_weights,
                                    const kjit_moe_route_options* options, void* stream) {
  return kjit::api::entry<&kjit_moe_route>(
      [&] {
        const kjit_moe_route_options o = kjit::api::moe_route_options(options);
        kjit::ops::moe_route(logits, bias, topk_ids, topk_weights, o, stream);
      },
      logits, bias, topk_ids, topk_weights, options, stream);
}

KJIT_API kjit_status kjit_moe_permute(const DLTensor* x, const DLTensor* topk_ids,
                                      DLTensor* permuted, DLTensor* expert_offsets,
                                      DLTensor* permuted_to_src, DLTensor* src_to_permuted,
                                      void* stream) {
  return kjit::api::entry<&kjit_moe_permute>(
      [&] {
        kjit::ops::moe_permute(x, topk_ids, permuted, expert_offsets, permuted_to_src,
                               src_to_permuted, stream);
      },
      x, topk_ids, permuted, expert_offsets, permuted_to_src, src_to_permuted, stream);
}

KJIT_API kjit_status kjit_moe_finalize(const DLTensor* expert_out, const DLTensor* src_to_permuted,
                                       const DLTensor* topk_weights, const DLTensor* shared_out,
                                       DLTensor* out, void* stream) {
  return kjit::api::entry<&kjit_moe_finalize>(
      [&] {
        kjit::ops::moe_finalize(expert_out, src_to_permuted, topk_weights, shared_out, out, stream);
      },
      expert_out, src_to_permuted, topk_weights, shared_out, out, stream);
}

KJIT_API kjit_status kjit_moe_grouped_gemm(const DLTensor* a, const DLTensor* b,
                                           const DLTensor* expert_offsets, DLTensor* out,
                                           void* stream) {
  return kjit::api::entry<&kjit_moe_grouped_gemm>(
      [&] { kjit::ops::moe_grouped_gemm(a, b, expert_offsets, out, stream); }, a, b, expert_offsets,
      out, stream);
}

KJIT_API kjit_status kjit_moe_grouped_gemm_masked(const DLTensor* a, const DLTensor* b,
                                                  const DLTensor* counts, DLTensor* out,
                                                  void* stream) {
  return kjit::api::entry<&kjit_moe_grouped_gemm_masked>(
      [&] { kjit::ops::moe_grouped_gemm_masked(a, b, counts, out, stream); }, a, b, counts, out,
      stream);
}

KJIT_API kjit_status kjit_moe_grouped_gemm_fp8(const DLTensor* a, const DLTensor* b,
                                               const DLTensor* scale_a, const DLTensor* scale_b,
                                               const DLTensor* expert_offsets, DLTensor* out,
                                               void* stream) {
  return kjit::api::entry<&kjit_moe_grouped_gemm_fp8>(
      [&] { kjit::ops::moe_grouped_gemm_fp8(a, b, scale_a, scale_b, expert_offsets, out, stream); },
      a, b, scale_a, scale_b, expert_offsets, out, stream);
}

KJIT_API kjit_status kjit_moe_grouped_gemm_fp8_masked(const DLTensor* a, const DLTensor* b,
                                                      const DLTensor* scale_a,
                                                      const DLTensor* scale_b,
                                                      const DLTensor* counts, DLTensor* out,
                                                      void* stream) {
  return kjit::api::entry<&kjit_moe_grouped_gemm_fp8_masked>(
      [&] { kjit::ops::moe_grouped_gemm_fp8_masked(a, b, scale_a, scale_b, counts, out, stream); },
      a, b, scale_a, scale_b, counts, out, stream);
}

KJIT_API void kjit_moe_forward_options_init(kjit_moe_forward_options* options) {
  if (options == nullptr) return;
  *options = kjit_moe_forward_options{};
  options->struct_size = sizeof(kjit_moe_forward_options);
  kjit_moe_route_options_init(&options->route);
}

KJIT_API kjit_status kjit_moe_forward_workspace_bytes(int64_t tokens, int64_t experts,
                                                      int64_t top_k, int64_t hidden,
                                                      int64_t intermediate, DLDataType dtype,
                                                      size_t* bytes) {
  return kjit::api::guarded(
      "kjit_moe_forward_workspace_bytes",
      [&](kjit::api::CallLog& log) {
        log.scalar("tokens", tokens).scalar("experts", experts).scalar("top_k", top_k);
        log.scalar("hidden", hidden).scalar("intermediate", intermediate);
      },
      [&] {
        if (bytes == nullptr) kjit::fail(KJIT_ERROR_INVALID_ARGUMENT, "bytes is NULL");
        const std::optional<kjit::ops::DType> dt = kjit::ops::dtype_of(dtype);
        if (!dt) {
          kjit::fail(KJIT_ERROR_UNSUPPORTED,
                     "dtype (code {}, {} bits, {} lanes) is not bf16 or fp16 (or float8_e4m3fn: "
                     "fp8 experts)",
                     dtype.code, dtype.bits, dtype.lanes);
        }
        *bytes =
            kjit::ops::moe_forward_layout(tokens, experts, top_k, hidden, intermediate, *dt).bytes;
      });
}

KJIT_API kjit_status kjit_moe_forward(const DLTensor* x, const DLTensor* router_logits,
                                      const DLTensor* bias, const DLTensor* w13, const DLTensor* w2,
                                      const DLTensor* shared_out, DLTensor* workspace,
                                      DLTensor* out, int top_k,
                                      const kjit_moe_forward_options* options, void* stream) {
  return kjit::api::entry<&kjit_moe_forward>(
      [&] {
        const kjit_moe_forward_options o = kjit::api::moe_forward_options(options);
        kjit::ops::moe_forward(x, router_logits, bias, w13, w2, shared_out, workspace, out, top_k,
                               o.route, stream);
      },
      x, router_logits, bias, w13, w2, shared_out, workspace, out, top_k, options, stream);
}

KJIT_API kjit_status kjit_moe_forward_fp8(const DLTensor* x, const DLTensor* router_logits,
                                          const DLTensor* bias, const DLTensor* w13,
                                          const DLTensor* w13_scale, const DLTensor* w2,
                                          const DLTensor* w2_scale, const DLTensor* shared_out,
                                          DLTensor* workspace, DLTensor* out, int top_k,
                                          const kjit_moe_forward_options* options, void* stream) {
  return kjit::api::entry<&kjit_moe_forward_fp8>(
      [&] {
        const kjit_moe_forward_options o = kjit::api::moe_forward_options(options);
        kjit::ops::moe_forward_fp8(x, router_logits, bias, w13, w13_scale, w2, w2_scale, shared_out,
                                   workspace, out, top_k, o.route, stream);
      },
      x, router_logits, bias, w13, w13_scale, w2, w2_scale, shared_out, workspace, out, top_k,
      options, stream);
}

}  // extern "C"
