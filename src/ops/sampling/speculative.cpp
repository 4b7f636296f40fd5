#include "ops/sampling/speculative.hpp"

#include <fmt/format.h>

#include <climits>
#include <tuple>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "ops/sampling/sampling_args.hpp"
#include "ops/sampling/sampling_desc.hpp"
#include "runtime/jit_core.hpp"
#include "sampling/sampling_params.h"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using namespace sampling_args;

// A [batch, steps, vocab] fp32 probability tensor: last dim contiguous, the others free.
StridedView probs_view(const DLTensor* t, const char* name) {
  const StridedView v = as_strided_view(t, name);
  if (v.ndim != 3) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be 3-D [batch, steps, vocab], got ndim {}", name,
         v.ndim);
  }
  if (v.dtype != DType::kF32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be fp32, got {}", name, dtype_name(v.dtype));
  }
  return v;
}

// A [batch, cols] int32 matrix on `device`: last dim contiguous, rows strided.
StridedView ids_view(const DLTensor* t, const char* name, int64_t batch, int64_t cols, int device) {
  const StridedView v = as_strided_view(t, name);
  if (v.ndim != 2 || v.shape[0] != batch || v.shape[1] != cols) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be [batch = {}, {}]", name, batch, cols);
  }
  if (v.dtype != DType::kI32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be int32, got {}", name, dtype_name(v.dtype));
  }
  if (v.device != device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on cuda:{} but draft_probs is on cuda:{}", name,
         v.device, device);
  }
  return v;
}

Span span_of(const StridedView& v, const char* name) {
  const auto lo = reinterpret_cast<uintptr_t>(v.data);
  if (v.numel() == 0) return {name, lo, lo};
  int64_t last = 0;
  for (int i = 0; i < v.ndim; ++i) last += (v.shape[i] - 1) * v.strides[i];
  return {name, lo, lo + static_cast<uintptr_t>(last + 1) * v.elem_bytes()};
}

}  // namespace

jit::Spec chain_speculative_spec(const SpeculativeConfig& c) {
  jit::SpecBuilder b("chain_speculative_sampling", {"common", "sampling"},
                     "sampling/speculative.cuh");
  b.value("threads", c.threads);
  b.entry("kjit::sampling::chain_speculative_kernel");
  return b.build();
}

void chain_speculative_sampling(const DLTensor* draft_probs, const DLTensor* draft_token_ids,
                                const DLTensor* target_probs, const DLTensor* seed,
                                const DLTensor* offset, DLTensor* output_token_ids,
                                DLTensor* accepted, DLTensor* emitted, void* stream) {
  const StridedView dp = probs_view(draft_probs, "draft_probs");
  const StridedView tp = probs_view(target_probs, "target_probs");
  const int64_t batch = dp.shape[0], n = dp.shape[1], vocab = dp.shape[2];
  const int dev = dp.device;
  if (tp.device != dev) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "target_probs is on cuda:{} but draft_probs is on cuda:{}",
         tp.device, dev);
  }
  if (tp.shape[0] != batch || tp.shape[1] != n + 1 || tp.shape[2] != vocab) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "target_probs must be [batch = {}, num_draft + 1 = {}, vocab = {}] (one more step than "
         "draft_probs), got [{}, {}, {}]",
         batch, n + 1, vocab, tp.shape[0], tp.shape[1], tp.shape[2]);
  }
  const StridedView ids = ids_view(draft_token_ids, "draft_token_ids", batch, n, dev);
  const StridedView out = ids_view(output_token_ids, "output_token_ids", batch, n + 1, dev);
  if (self_overlaps(out)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "output_token_ids has rows that overlap each other");
  }
  Batch b;  // what the per-request vectors are checked against
  b.name = "draft_probs";
  b.batch = batch;
  b.m.device = dev;
  const Vector sd = rng_vector(seed, "seed", b);
  const Vector of = rng_vector(offset, "offset", b);
  std::vector<Span> written = {span_of(out, "output_token_ids")};
  Vector acc, emi;
  for (auto [t, v, name] :
       {std::tuple{accepted, &acc, "accepted"}, std::tuple{emitted, &emi, "emitted"}}) {
    if (t == nullptr) continue;
    *v = as_vector(t, name);
    if (!is_type(v->dtype, kDLInt, 32)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be int32, got {}", name, type_text(v->dtype));
    }
    check_length(*v, batch, false);
    check_device(*v, b);
    written.push_back(span_of(*v));
  }
  std::vector<Span> all = written;
  for (const Span& s : {span_of(dp, "draft_probs"), span_of(tp, "target_probs"),
                        span_of(ids, "draft_token_ids"), span_of(sd), span_of(of)}) {
    all.push_back(s);
  }
  check_no_overlap(written, all);

  if (batch == 0) return;  // after validation
  if (n < 1 || n > kSpeculativeMaxDraft) {
    fail(n < 1 ? KJIT_ERROR_INVALID_ARGUMENT : KJIT_ERROR_UNSUPPORTED,
         "chain_speculative_sampling takes 1..{} draft tokens per request, not {}",
         kSpeculativeMaxDraft, n);
  }
  if (vocab < 1 || vocab > INT_MAX || batch > INT_MAX) {
    fail(vocab < 1 ? KJIT_ERROR_INVALID_ARGUMENT : KJIT_ERROR_UNSUPPORTED,
         "chain_speculative_sampling takes a vocab of 1..{} and up to {} requests, got {} and {}",
         INT_MAX, INT_MAX, vocab, batch);
  }
  if (trace::enabled()) trace::chain_speculative(vocab, n, batch);

  const SpeculativeConfig cfg;
  const jit::LoadedKernel& k = jit::JitCore::global().kernel_for(
      "chain_speculative_sampling", cfg, dev, [&] { return chain_speculative_spec(cfg); });
  sampling::SpeculativeParams p{};
  p.draft_probs = reinterpret_cast<const float*>(dp.data);
  p.draft_ids = reinterpret_cast<const int*>(ids.data);
  p.target_probs = reinterpret_cast<const float*>(tp.data);
  p.seed = reinterpret_cast<const unsigned long long*>(sd.data);
  p.offset = reinterpret_cast<const unsigned long long*>(of.data);
  p.out = reinterpret_cast<int*>(out.data);
  p.accepted = accepted != nullptr ? reinterpret_cast<int*>(acc.data) : nullptr;
  p.emitted = emitted != nullptr ? reinterpret_cast<int*>(emi.data) : nullptr;
  p.dp_batch = dp.strides[0];
  p.dp_step = dp.strides[1];
  p.tp_batch = tp.strides[0];
  p.tp_step = tp.strides[1];
  p.ids_batch = ids.strides[0];
  p.out_batch = out.strides[0];
  p.seed_stride = sd.n == 1 ? 0 : 1;
  p.offset_stride = of.n == 1 ? 0 : 1;
  p.num_draft = static_cast<int>(n);
  p.vocab = static_cast<int>(vocab);
  p.per_row_seed = sd.n == 1 ? 0 : 1;
  cuda::LaunchConfig lc;
  lc.grid_x = static_cast<unsigned>(batch);
  lc.block_x = static_cast<unsigned>(cfg.threads);
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(dev);
  cuda::launch(k.functions.at(0), lc, &p);
}

}  // namespace kjit::ops
