#include "ops/moe/moe.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "moe/moe_params.h"
#include "ops/moe/moe_checks.hpp"
#include "ops/moe/moe_desc.hpp"
#include "ops/tensor.hpp"
#include "runtime/jit_core.hpp"
#include "util/error.hpp"
#include "util/math.hpp"

namespace kjit::ops {

using util::ceil_div;

namespace {
using cuda::kMaxInt32;
using moe_detail::check_disjoint;
using moe_detail::compact;
using moe_detail::matrix_2d;
using moe_detail::per_slot_ids;
using moe_detail::vector_width;
}  // namespace

// ---- routing ----------------------------------------------------------------------------------

MoeRouteConfig select_moe_route(DType dtype, int64_t experts, int64_t top_k) {
  if (!is_float(dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "moe_route: logits are fp32, fp16 or bf16, not {}",
         dtype_name(dtype));
  }
  if (experts > moe::kMoeMaxExperts || top_k > moe::kMoeMaxTopK) {
    fail(KJIT_ERROR_UNSUPPORTED, "moe_route: {} experts, top {} (at most {} experts, top {})",
         experts, top_k, moe::kMoeMaxExperts, moe::kMoeMaxTopK);
  }
  return MoeRouteConfig{dtype};
}

jit::Spec moe_route_spec(const MoeRouteConfig& c) {
  jit::SpecBuilder b("moe_route", {"common", "gemm", "moe"}, "moe/moe_route.cuh");
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.entry("kjit::moe::moe_route_kernel");
  return b.build();
}

void check_moe_route_options(const kjit_moe_route_options& o, int64_t experts, int64_t top_k) {
  if (o.scoring != KJIT_MOE_SCORING_SOFTMAX && o.scoring != KJIT_MOE_SCORING_SIGMOID) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "options->scoring is {} (KJIT_MOE_SCORING_SOFTMAX or _SIGMOID)", o.scoring);
  }
  if (o.renormalize != 0 && o.renormalize != 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "options->renormalize is {} (0 or 1)", o.renormalize);
  }
  if (!std::isfinite(o.routed_scaling_factor)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "options->routed_scaling_factor must be finite");
  }
  if (experts < 1 || top_k < 1 || top_k > experts) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "top_k ({}) must be in 1 .. experts ({})", top_k, experts);
  }
  if (o.n_group < 1 || o.n_group > moe::kMoeMaxGroups || experts % o.n_group != 0 ||
      (o.n_group > 1 && experts / o.n_group < 2)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "options->n_group is {}: 1 .. {}, dividing the {} experts into groups of 2 or more",
         o.n_group, moe::kMoeMaxGroups, experts);
  }
  if (o.topk_group < 1 || o.topk_group > o.n_group ||
      top_k > int64_t{o.topk_group} * (experts / o.n_group)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "options->topk_group is {}: 1 .. n_group ({}), with top_k ({}) experts in that many "
         "groups",
         o.topk_group, o.n_group, top_k);
  }
}

void moe_route(const DLTensor* logits, const DLTensor* bias, DLTensor* topk_ids,
               DLTensor* topk_weights, const kjit_moe_route_options& o, void* stream) {
  const RowMatrix x = matrix_2d(logits, "logits");
  const int64_t tokens = logits->shape[0];
  const int64_t experts = logits->shape[1];
  const auto [ids, top_k] = per_slot_ids(topk_ids, "topk_ids", tokens);
  const RowMatrix w = compact(topk_weights, "topk_weights", DType::kF32, tokens, top_k);
  RowMatrix bv;
  if (bias != nullptr) {
    bv = compact(bias, "bias", DType::kF32, -1, experts);
    check_same_device(x, "logits", bv, "bias");
  }
  check_same_device(x, "logits", ids, "topk_ids");
  check_same_device(x, "logits", w, "topk_weights");
  check_disjoint({{&x, "logits"},
                  {&ids, "topk_ids"},
                  {&w, "topk_weights"},
                  {bias != nullptr ? &bv : nullptr, "bias"}});
  check_moe_route_options(o, experts, top_k);
  const MoeRouteConfig cfg = select_moe_route(x.dtype, experts, top_k);
  if (tokens == 0) return;  // after validation: a zero-size call is still checked
  if (ceil_div(tokens, int64_t{moe::kMoeRouteThreads / 32}) > kMaxInt32) {
    fail(KJIT_ERROR_UNSUPPORTED, "moe_route: {} tokens exceed one launch", tokens);
  }
  if (trace::enabled()) trace::moe_route(x.dtype, tokens, experts, top_k, o);
  const jit::LoadedKernel& kern = jit::JitCore::global().kernel_for(
      "moe_route", cfg, x.device, [&] { return moe_route_spec(cfg); });
  moe::MoeRouteParams p{};
  p.logits = x.data;
  p.bias = bias != nullptr ? static_cast<const float*>(bv.data) : nullptr;
  p.topk_ids = static_cast<int*>(ids.data);
  p.topk_weights = static_cast<float*>(w.data);
  p.tokens = tokens;
  p.logits_stride = x.row_stride;
  p.experts = static_cast<int>(experts);
  p.top_k = static_cast<int>(top_k);
  p.scoring = o.scoring;
  p.n_group = o.n_group;
  p.topk_group = o.topk_group;
  p.renormalize = o.renormalize;
  p.routed_scaling_factor = o.routed_scaling_factor;
  cuda::LaunchConfig lc;
  lc.stream = static_cast<CUstream>(stream);
  lc.block_x = moe::kMoeRouteThreads;
  lc.grid_x = static_cast<unsigned>(ceil_div(tokens, int64_t{moe::kMoeRouteThreads / 32}));
  cuda::ScopedDevice scope(x.device);
  cuda::launch(kern.functions.at(0), lc, &p);
}

// ---- permutation ------------------------------------------------------------------------------

MoePermuteConfig select_moe_permute(DType dtype, int64_t experts, int alignment, int64_t hidden) {
  if (!is_float(dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "moe_permute: x is fp32, fp16 or bf16, not {}", dtype_name(dtype));
  }
  if (experts + 1 > moe::kMoeMaxPermuteExperts) {
    fail(KJIT_ERROR_UNSUPPORTED, "moe_permute: {} experts (at most {})", experts,
         moe::kMoeMaxPermuteExperts - 1);
  }
  MoePermuteConfig c;
  c.dtype = dtype;
  c.vec = vector_width(dtype, alignment, hidden);
  while (c.buckets < experts + 1) c.buckets *= 2;
  return c;
}

jit::Spec moe_permute_spec(const MoePermuteConfig& c) {
  jit::SpecBuilder b("moe_permute", {"common", "gemm", "moe"}, "moe/moe_permute.cuh");
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.value("vec", c.vec).value("buckets", c.buckets);
  b.entry("kjit::moe::moe_sort_kernel", {"buckets"});
  b.entry("kjit::moe::moe_permute_copy_kernel", {"dtype", "vec"});
  return b.build();
}

void moe_permute(const DLTensor* x, const DLTensor* topk_ids, DLTensor* permuted,
                 DLTensor* expert_offsets, DLTensor* permuted_to_src, DLTensor* src_to_permuted,
                 void* stream) {
  const RowMatrix xm = matrix_2d(x, "x");
  const int64_t tokens = x->shape[0];
  const int64_t hidden = x->shape[1];
  const auto [ids, top_k] = per_slot_ids(topk_ids, "topk_ids", tokens);
  int64_t pairs = 0;
  if (__builtin_mul_overflow(tokens, top_k, &pairs) || pairs > kMaxInt32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "tokens x top_k must be below 2^31");
  }
  const RowMatrix pm = matrix_2d(permuted, "permuted");
  if (permuted->shape[0] != pairs || permuted->shape[1] != hidden) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "permuted must be [tokens * top_k, hidden] = [{}, {}]", pairs,
         hidden);
  }
  as_row_matrix(expert_offsets, "expert_offsets");  // checked before its shape is read
  if (expert_offsets->ndim != 1) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "expert_offsets must be [experts + 1]");
  }
  const int64_t experts = expert_offsets->shape[0] - 1;
  if (experts < 1)
    fail(KJIT_ERROR_INVALID_ARGUMENT, "expert_offsets must be [experts + 1], experts >= 1");
  const RowMatrix off = compact(expert_offsets, "expert_offsets", DType::kI32, -1, experts + 1);
  const RowMatrix p2s = compact(permuted_to_src, "permuted_to_src", DType::kI32, -1, pairs);
  const RowMatrix s2p = compact(src_to_permuted, "src_to_permuted", DType::kI32, tokens, top_k);
  check_same_dtype(xm, "x", pm, "permuted");
  for (const auto& [m, name] : {std::pair{&ids, "topk_ids"},
                                {&pm, "permuted"},
                                {&off, "expert_offsets"},
                                {&p2s, "permuted_to_src"},
                                {&s2p, "src_to_permuted"}}) {
    check_same_device(xm, "x", *m, name);
  }
  check_disjoint({{&xm, "x"},
                  {&ids, "topk_ids"},
                  {&pm, "permuted"},
                  {&off, "expert_offsets"},
                  {&p2s, "permuted_to_src"},
                  {&s2p, "src_to_permuted"}});
  const MoePermuteConfig cfg =
      select_moe_permute(xm.dtype, experts, std::min(row_alignment(xm), row_alignment(pm)), hidden);
  if (pairs == 0) return;  // after validation: a zero-size call is still checked
  if (trace::enabled()) trace::moe_permute(xm.dtype, tokens, hidden, experts, top_k);
  const jit::LoadedKernel& kern = jit::JitCore::global().kernel_for(
      "moe_permute", cfg, xm.device, [&] { return moe_permute_spec(cfg); });
  moe::MoePermuteParams p{};
  p.topk_ids = static_cast<const int*>(ids.data);
  p.expert_offsets = static_cast<int*>(off.data);
  p.permuted_to_src = static_cast<int*>(p2s.data);
  p.src_to_permuted = static_cast<int*>(s2p.data);
  p.x = xm.data;
  p.permuted = pm.data;
  p.pairs = pairs;
  p.hidden = hidden;
  p.x_stride = xm.row_stride;
  p.permuted_stride = pm.row_stride;
  p.experts = static_cast<int>(experts);
  p.top_k = static_cast<int>(top_k);
  cuda::ScopedDevice scope(xm.device);
  cuda::LaunchConfig lc;
  lc.stream = static_cast<CUstream>(stream);
  lc.block_x = moe::kMoeSortThreads;
  cuda::launch(kern.functions.at(0), lc, &p);
  if (hidden == 0) return;
  lc.block_x = moe::kMoeCopyThreads;
  lc.grid_x = static_cast<unsigned>(pairs);
  cuda::launch(kern.functions.at(1), lc, &p);
}

// ---- finalize ---------------------------------------------------------------------------------

MoeFinalizeConfig select_moe_finalize(DType dtype, int alignment, int64_t hidden) {
  if (!is_float(dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "moe_finalize: expert_out is fp32, fp16 or bf16, not {}",
         dtype_name(dtype));
  }
  return MoeFinalizeConfig{dtype, vector_width(dtype, alignment, hidden)};
}

jit::Spec moe_finalize_spec(const MoeFinalizeConfig& c) {
  jit::SpecBuilder b("moe_finalize", {"common", "gemm", "moe"}, "moe/moe_permute.cuh");
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.value("vec", c.vec);
  b.entry("kjit::moe::moe_finalize_kernel");
  return b.build();
}

void moe_finalize(const DLTensor* expert_out, const DLTensor* src_to_permuted,
                  const DLTensor* topk_weights, const DLTensor* shared_out, DLTensor* out,
                  void* stream) {
  const RowMatrix eo = matrix_2d(expert_out, "expert_out");
  const RowMatrix y = matrix_2d(out, "out");
  const int64_t tokens = out->shape[0];
  const int64_t hidden = out->shape[1];
  if (expert_out->shape[1] != hidden) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "expert_out's last dim is {} but out's is {}",
         expert_out->shape[1], hidden);
  }
  const auto [s2p, top_k] = per_slot_ids(src_to_permuted, "src_to_permuted", tokens);
  const RowMatrix w = compact(topk_weights, "topk_weights", DType::kF32, tokens, top_k);
  if (top_k > moe::kMoeMaxTopK) {
    fail(KJIT_ERROR_UNSUPPORTED, "moe_finalize: top_k {} (at most {})", top_k, moe::kMoeMaxTopK);
  }
  check_same_dtype(eo, "expert_out", y, "out");
  RowMatrix sv;
  if (shared_out != nullptr) {
    sv = matrix_2d(shared_out, "shared_out");
    if (shared_out->shape[0] != tokens || shared_out->shape[1] != hidden) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "shared_out must be out's shape [{}, {}]", tokens, hidden);
    }
    check_same_dtype(eo, "expert_out", sv, "shared_out");
    check_same_device(y, "out", sv, "shared_out");
    // out may be shared_out itself (each element is read before it is written), not part of it.
    if (partially_overlaps(y, sv)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps shared_out");
  }
  check_same_device(y, "out", eo, "expert_out");
  check_same_device(y, "out", s2p, "src_to_permuted");
  check_same_device(y, "out", w, "topk_weights");
  check_disjoint(
      {{&y, "out"}, {&eo, "expert_out"}, {&s2p, "src_to_permuted"}, {&w, "topk_weights"}});
  if (shared_out != nullptr) {
    check_disjoint({{&sv, "shared_out"},
                    {&eo, "expert_out"},
                    {&s2p, "src_to_permuted"},
                    {&w, "topk_weights"}});
  }
  int align = std::min(row_alignment(y), row_alignment(eo));
  if (shared_out != nullptr) align = std::min(align, row_alignment(sv));
  const MoeFinalizeConfig cfg = select_moe_finalize(y.dtype, align, hidden);
  if (tokens == 0 || hidden == 0) return;
  if (tokens > kMaxInt32) fail(KJIT_ERROR_UNSUPPORTED, "moe_finalize: {} tokens", tokens);
  if (trace::enabled()) trace::moe_finalize(y.dtype, tokens, hidden, top_k, shared_out != nullptr);
  const jit::LoadedKernel& kern = jit::JitCore::global().kernel_for(
      "moe_finalize", cfg, y.device, [&] { return moe_finalize_spec(cfg); });
  moe::MoeFinalizeParams p{};
  p.expert_out = eo.data;
  p.src_to_permuted = static_cast<const int*>(s2p.data);
  p.topk_weights = static_cast<const float*>(w.data);
  p.shared_out = shared_out != nullptr ? sv.data : nullptr;
  p.out = y.data;
  p.tokens = tokens;
  p.hidden = hidden;
  p.expert_stride = eo.row_stride;
  p.shared_stride = shared_out != nullptr ? sv.row_stride : 0;
  p.out_stride = y.row_stride;
  p.expert_rows = expert_out->shape[0];
  p.top_k = static_cast<int>(top_k);
  cuda::LaunchConfig lc;
  lc.stream = static_cast<CUstream>(stream);
  lc.block_x = moe::kMoeFinalizeThreads;
  lc.grid_x = static_cast<unsigned>(tokens);
  cuda::ScopedDevice scope(y.device);
  cuda::launch(kern.functions.at(0), lc, &p);
}

}  // namespace kjit::ops
