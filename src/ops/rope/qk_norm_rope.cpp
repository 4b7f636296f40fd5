#include "ops/rope/qk_norm_rope.hpp"

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <utility>

#include "ops/norm/norm.hpp"
#include "ops/pdl.hpp"
#include "ops/rope/rope.hpp"
#include "ops/rope/rope_desc.hpp"
#include "ops/rope/rope_detail.hpp"
#include "ops/tensor.hpp"
#include "rope/qk_norm_rope_params.h"
#include "runtime/jit_core.hpp"
#include "util/error.hpp"

namespace kjit::ops {

using namespace rope_detail;

QkNormRopeConfig select_qk_norm_rope(DType dtype, int64_t head_dim, int64_t rot_dim,
                                     bool interleave, int align_bytes) {
  const RopeConfig r =
      select_rope(RopeMode::kFreq, dtype, head_dim, rot_dim, interleave, align_bytes);
  QkNormRopeConfig c;
  c.dtype = r.dtype;
  c.head_dim = r.head_dim;
  c.rot_dim = r.rot_dim;
  c.interleave = r.interleave;
  c.vec = r.vec;
  return c;
}

// One name a setting, from the config field to the kernel's template parameters (in upper case).
jit::Spec qk_norm_rope_spec(const QkNormRopeConfig& c) {
  jit::SpecBuilder b("qk_norm_rope", {"common", "rope"}, "rope/qk_norm_rope.cuh");
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.value("head_dim", c.head_dim).value("rot_dim", c.rot_dim);
  b.flag("interleave", c.interleave != 0).value("vec", c.vec);
  b.entry("kjit::rope::qk_norm_rope_kernel");
  return b.build();
}

namespace {

// A norm weight: [head_dim] in q's dtype on q's device, contiguous.
StridedView weight_view(const DLTensor* t, const char* name, const StridedView& q) {
  StridedView w = as_strided_view(t, name);
  check_same_dtype_device(q, "q", w, name);
  if (w.ndim != 1 || w.shape[0] != q.shape[2]) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be [head_dim = {}], got ndim {} with {} elements",
         name, q.shape[2], w.ndim, w.numel());
  }
  return w;
}

}  // namespace

void qk_rmsnorm_rope(const DLTensor* q_weight, const DLTensor* k_weight, const DLTensor* pos_ids,
                     DLTensor* q, DLTensor* k, float eps, int rotary_dim, int interleave,
                     float rope_scale, float rope_theta, void* stream,
                     const ElementwiseLaunch& launch) {
  QkViews w;
  w.q = as_strided_view(q, "q");
  w.k = as_strided_view(k, "k");
  check_ndim3(w.q, "q", "num_qo_heads");
  check_ndim3(w.k, "k", "num_kv_heads");
  check_same_dtype_device(w.q, "q", w.k, "k");
  if (w.k.shape[0] != w.q.shape[0]) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "k has {} tokens but q has {}", w.k.shape[0], w.q.shape[0]);
  }
  if (w.k.shape[2] != w.q.shape[2]) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "k has head_dim {} but q has {}", w.k.shape[2], w.q.shape[2]);
  }
  check_writable(w.q, "q");
  check_writable(w.k, "k");
  check_no_alias(w.k, "k", w.q, "q", false);
  w.q_out = w.q;
  w.k_out = w.k;
  w.tokens = w.q.shape[0];
  w.q_heads = w.q.shape[1];
  w.k_heads = w.k.shape[1];
  w.head_dim = w.q.shape[2];
  const StridedView qw = weight_view(q_weight, "q_weight", w.q);
  const StridedView kw = weight_view(k_weight, "k_weight", w.q);
  const StridedView pos = positions_view(pos_ids, "pos_ids", w.tokens, w.q);
  for (const auto& [in, name] :
       {std::pair{&qw, "q_weight"}, std::pair{&kw, "k_weight"}, std::pair{&pos, "pos_ids"}}) {
    check_no_alias(w.q, "q", *in, name, false);
    check_no_alias(w.k, "k", *in, name, false);
  }
  norm_detail::check_eps(eps);
  const int rot = resolve_rotary_dim(rotary_dim, w.head_dim, "rotary_dim");
  check_flag(interleave, "layout");
  check_positive_finite(rope_scale, "rope_scale");
  check_positive_finite(rope_theta, "rope_theta");

  const int64_t h_total = w.q_heads + w.k_heads;
  if (w.tokens == 0 || h_total == 0) return;  // after validation
  check_supported(w.q.dtype, w.head_dim);
  if (rot > kRopeMaxRotDim) {
    fail(KJIT_ERROR_UNSUPPORTED, "rope supports rotary_dim up to {}, not {}", kRopeMaxRotDim, rot);
  }
  if (w.tokens > INT_MAX || h_total > INT_MAX) {
    fail(KJIT_ERROR_UNSUPPORTED, "qk_rmsnorm_rope supports up to {} tokens and heads", INT_MAX);
  }
  int align = 16;
  for (const StridedView* x : std::initializer_list<const StridedView*>{&w.q, &w.k, &qw, &kw}) {
    if (x->numel() > 0) align = std::min(align, view_alignment(*x));
  }
  const QkNormRopeConfig cfg =
      select_qk_norm_rope(w.q.dtype, w.head_dim, rot, interleave != 0, align);
  if (trace::enabled()) {
    trace::qk_norm_rope(
        {w.q.dtype, w.q_heads, w.k_heads, w.head_dim, rot, interleave != 0, pos.dtype}, w.tokens);
  }
  const int dev = w.q.device;
  const jit::LoadedKernel& kernel = jit::JitCore::global().kernel_for(
      "qk_norm_rope", cfg, dev, [&] { return qk_norm_rope_spec(cfg); });

  const FusedRope fr =
      fused_rope(w, pos, cfg.dtype, cfg.head_dim, cfg.rot_dim, cfg.interleave, cfg.vec,
                 plain_key(cfg.rot_dim, rope_scale, rope_theta), h_total, dev);
  rope::QkNormRopeParams<kRopeMaxRotDim / 2> p{};
  p.rope = fr.params.a;
  std::copy(std::begin(fr.params.freq), std::end(fr.params.freq), p.freq);
  p.q_weight = qw.data;
  p.k_weight = kw.data;
  p.eps = eps;

  launch_fused(fr, kernel.functions.at(0), &p, stream, dev, launch);
}

}  // namespace kjit::ops
