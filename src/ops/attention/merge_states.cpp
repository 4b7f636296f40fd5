#include "ops/attention/merge_states.hpp"

#include <algorithm>
#include <climits>
#include <string>
#include <utility>

#include "attention/attention_params.h"
#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "runtime/jit_core.hpp"
#include "ops/attention/attention_desc.hpp"
#include "ops/tensor.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using attention::MergeStatesParams;

constexpr int kMergeBlock = 128;

StridedView v_view(const DLTensor* t, const char* name, int ndim) {
  StridedView v = as_strided_view(t, name);
  if (v.ndim != ndim) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be {}, got ndim {}", name,
         ndim == 3 ? "[seqs, heads, dim]" : "[n, seqs, heads, dim]", v.ndim);
  }
  if (!is_float(v.dtype)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be bf16, fp16 or fp32, got {}", name,
         dtype_name(v.dtype));
  }
  return v;
}

StridedView s_view(const DLTensor* t, const char* name, int ndim) {
  StridedView v = as_strided_view(t, name);
  if (v.ndim != ndim) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be {}, got ndim {}", name,
         ndim == 2 ? "[seqs, heads]" : "[n, seqs, heads]", v.ndim);
  }
  if (v.dtype != DType::kF32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be fp32, got {}", name, dtype_name(v.dtype));
  }
  return v;
}

// b must have a's dtype, device and the shape of a's dims [from, a.ndim).
void check_like(const StridedView& a, const char* an, const StridedView& b, const char* bn,
                int from_a, int from_b, bool same_dtype) {
  if (same_dtype && a.dtype != b.dtype) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is {} but {} is {}", bn, dtype_name(b.dtype), an,
         dtype_name(a.dtype));
  }
  if (a.device != b.device) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} is on cuda:{} but {} is on cuda:{}", bn, b.device, an,
         a.device);
  }
  for (int i = from_a, j = from_b; i < a.ndim && j < b.ndim; ++i, ++j) {
    if (a.shape[i] != b.shape[j]) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} dim {} is {} but {} dim {} is {}", bn, j, b.shape[j],
           an, i, a.shape[i]);
    }
  }
}

// s_out as a view shaped like dims [from, ...) of `like`; absent, a view of nothing.
StridedView s_out_view(const DLTensor* s_out, const StridedView& like, const char* like_name,
                       int from) {
  StridedView so;
  so.ndim = 1;
  if (s_out != nullptr) {
    so = s_view(s_out, "s_out", 2);
    check_like(like, like_name, so, "s_out", from, 0, false);
  }
  return so;
}

void check_writable(const StridedView& v, const char* name) {
  if (self_overlaps(v)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has strides under which elements overlap", name);
  }
}

// The params' output half (v_out, s_out and their strides) and the rows' shape; the callers add
// their inputs.
MergeStatesParams output_params(const StridedView& vo, const StridedView& so, bool has_s_out,
                                int64_t seqs, int64_t heads, int64_t dim, int64_t n) {
  MergeStatesParams p{};
  p.v_out = vo.data;
  p.s_out = has_s_out ? reinterpret_cast<float*>(so.data) : nullptr;
  p.vo_ss = vo.strides[0];
  p.vo_sh = vo.strides[1];
  if (has_s_out) {
    p.so_ss = so.strides[0];
    p.so_sh = so.strides[1];
  }
  p.rows = seqs * heads;
  p.heads = static_cast<int>(heads);
  p.dim = static_cast<int>(dim);
  p.n = static_cast<int>(n);
  return p;
}

void launch_merge(int entry, DType dtype, int64_t dim, int align, MergeStatesParams& p, int device,
                  void* stream) {
  if (p.rows == 0) return;
  const MergeStatesConfig cfg = select_merge_states(dtype, dim, align);
  const jit::LoadedKernel& k = jit::JitCore::global().kernel_for(
      "merge_states", cfg, device, [&] { return merge_states_spec(cfg); });
  cuda::LaunchConfig lc;
  const int rows_per_block = kMergeBlock / cfg.threads_per_row;
  lc.grid_x = static_cast<unsigned>((p.rows + rows_per_block - 1) / rows_per_block);
  lc.block_x = kMergeBlock;
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(device);
  cuda::launch(k.functions.at(entry), lc, &p);
}

}  // namespace

MergeStatesConfig select_merge_states(DType dtype, int64_t dim, int align_bytes) {
  if (!is_float(dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "merge_states supports bf16, fp16 and fp32, not {}",
         dtype_name(dtype));
  }
  if (dim < 0 || dim > kMergeMaxDim) {
    fail(KJIT_ERROR_UNSUPPORTED, "merge_states supports dim up to {}, not {}", kMergeMaxDim, dim);
  }
  MergeStatesConfig c;
  c.dtype = dtype;
  const int elem = static_cast<int>(dtype_size(dtype));
  c.vec = 16 / elem;
  while (c.vec > 1 && (dim % c.vec != 0 || c.vec * elem > align_bytes)) c.vec /= 2;
  const int64_t vecs = std::max<int64_t>(1, dim / c.vec);
  c.threads_per_row = 1;
  while (c.threads_per_row < 32 && c.threads_per_row < vecs) c.threads_per_row *= 2;
  return c;
}

jit::Spec merge_states_spec(const MergeStatesConfig& c) {
  jit::SpecBuilder b("merge_states", {"common", "attention"}, "attention/merge_states.cuh");
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.value("vec", c.vec).value("threads_per_row", c.threads_per_row);
  b.entry("kjit::attention::merge_states2_kernel").entry("kjit::attention::merge_states_n_kernel");
  return b.build();
}

void merge_states(const DLTensor* v_a, const DLTensor* s_a, const DLTensor* v_b,
                  const DLTensor* s_b, DLTensor* v_out, DLTensor* s_out, void* stream) {
  const StridedView va = v_view(v_a, "v_a", 3);
  const StridedView sa = s_view(s_a, "s_a", 2);
  const StridedView vb = v_view(v_b, "v_b", 3);
  const StridedView sb = s_view(s_b, "s_b", 2);
  const StridedView vo = v_view(v_out, "v_out", 3);
  check_like(va, "v_a", vb, "v_b", 0, 0, true);
  check_like(va, "v_a", vo, "v_out", 0, 0, true);
  check_like(va, "v_a", sa, "s_a", 0, 0, false);
  check_like(va, "v_a", sb, "s_b", 0, 0, false);
  const StridedView so = s_out_view(s_out, va, "v_a", 0);
  check_writable(vo, "v_out");
  check_writable(so, "s_out");
  // In place: only as the exact same view of one input.
  using Named = std::pair<const StridedView*, const char*>;
  for (const auto& [in, name] :
       {Named{&va, "v_a"}, Named{&vb, "v_b"}, Named{&sa, "s_a"}, Named{&sb, "s_b"}}) {
    const bool v_in = in == &va || in == &vb;
    if (views_overlap(vo, *in) && !(v_in && same_view(vo, *in))) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "v_out overlaps {} without being the same view", name);
    }
    if (views_overlap(so, *in) && !(!v_in && same_view(so, *in))) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "s_out overlaps {} without being the same view", name);
    }
  }
  if (views_overlap(vo, so)) fail(KJIT_ERROR_INVALID_ARGUMENT, "s_out overlaps v_out");

  const int64_t seqs = va.shape[0], heads = va.shape[1], dim = va.shape[2];
  if (seqs * heads == 0) return;  // after validation
  if (heads > INT_MAX || dim > kMergeMaxDim) {
    fail(KJIT_ERROR_UNSUPPORTED, "merge_states supports up to {} heads of up to {} elements",
         INT_MAX, kMergeMaxDim);
  }
  int align = 16;
  for (const StridedView* t : {&va, &vb, &vo}) align = std::min(align, view_alignment(*t));
  if (trace::enabled()) trace::merge_states(va.dtype, heads, dim, seqs);

  MergeStatesParams p = output_params(vo, so, s_out != nullptr, seqs, heads, dim, 2);
  p.v_a = va.data;
  p.s_a = reinterpret_cast<const float*>(sa.data);
  p.v_b = vb.data;
  p.s_b = reinterpret_cast<const float*>(sb.data);
  p.va_ss = va.strides[0];
  p.va_sh = va.strides[1];
  p.vb_ss = vb.strides[0];
  p.vb_sh = vb.strides[1];
  p.sa_ss = sa.strides[0];
  p.sa_sh = sa.strides[1];
  p.sb_ss = sb.strides[0];
  p.sb_sh = sb.strides[1];
  launch_merge(0, va.dtype, dim, align, p, va.device, stream);
}

void merge_states_n(const DLTensor* v, const DLTensor* s, DLTensor* v_out, DLTensor* s_out,
                    void* stream) {
  const StridedView vv = v_view(v, "v", 4);
  const StridedView sv = s_view(s, "s", 3);
  const StridedView vo = v_view(v_out, "v_out", 3);
  check_like(vv, "v", sv, "s", 0, 0, false);
  check_like(vv, "v", vo, "v_out", 1, 0, true);
  const StridedView so = s_out_view(s_out, vv, "v", 1);
  check_writable(vo, "v_out");
  check_writable(so, "s_out");
  using Named = std::pair<const StridedView*, const char*>;
  for (const auto& [o, on] : {Named{&vo, "v_out"}, Named{&so, "s_out"}}) {
    if (views_overlap(*o, vv)) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} overlaps v", on);
    if (views_overlap(*o, sv)) fail(KJIT_ERROR_INVALID_ARGUMENT, "{} overlaps s", on);
  }
  if (views_overlap(vo, so)) fail(KJIT_ERROR_INVALID_ARGUMENT, "s_out overlaps v_out");

  const int64_t n = vv.shape[0], seqs = vv.shape[1], heads = vv.shape[2], dim = vv.shape[3];
  if (seqs * heads == 0) return;  // after validation
  if (heads > INT_MAX || n > INT_MAX || dim > kMergeMaxDim) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "merge_states_n supports up to {} states and heads of up to {} elements", INT_MAX,
         kMergeMaxDim);
  }
  int align = std::min(view_alignment(vv), view_alignment(vo));
  if (trace::enabled()) trace::merge_states_n(vv.dtype, heads, dim, seqs, n);

  MergeStatesParams p = output_params(vo, so, s_out != nullptr, seqs, heads, dim, n);
  p.v_a = vv.data;
  p.s_a = reinterpret_cast<const float*>(sv.data);
  p.va_ss = vv.strides[1];
  p.va_sh = vv.strides[2];
  p.sa_ss = sv.strides[1];
  p.sa_sh = sv.strides[2];
  p.v_sn = vv.strides[0];
  p.s_sn = sv.strides[0];
  launch_merge(1, vv.dtype, dim, align, p, vv.device, stream);
}

}  // namespace kjit::ops
