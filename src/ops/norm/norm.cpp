#include "ops/norm/norm.hpp"

#include <algorithm>
#include <cmath>

#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "runtime/jit_core.hpp"
#include "norm/norm_params.h"
#include "ops/norm/norm_desc.hpp"
#include "ops/pdl.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

RmsNormConfig select_row_norm(const char* op, DType dtype, int64_t hidden, int align_bytes,
                              int64_t rows, const NormTuning& tuning) {
  if (!is_float(dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "{} supports fp32, fp16 and bf16, not {}", op, dtype_name(dtype));
  }
  if (hidden < 1 || hidden > kRmsNormMaxHidden) {
    fail(KJIT_ERROR_UNSUPPORTED, "{} supports hidden sizes 1..{}, not {}", op, kRmsNormMaxHidden,
         hidden);
  }
  RmsNormConfig c;
  c.dtype = dtype;
  c.hidden = static_cast<int>(hidden);
  const int elem = static_cast<int>(dtype_size(dtype));
  // Widest vector the alignment and the row length allow: 16 B when both cooperate, else narrower
  // down to scalar, so odd sizes and misaligned views still run (just slower).
  c.vec = 16 / elem;
  while (c.vec > 1 && (c.hidden % c.vec != 0 || c.vec * elem > align_bytes)) c.vec /= 2;
  norm_detail::row_shape(c.hidden / c.vec, c.vec, rows, tuning, c.threads_per_row,
                         c.rows_per_block);
  c.early_params = rows <= kNormEarlyParamsMaxRows ? 1 : 0;
  return c;
}

// One name a setting, from the config field to the kernel's template parameter (in upper case).
jit::Spec row_norm_spec(const char* op, const char* include, const char* kernel,
                        const RmsNormConfig& c) {
  jit::SpecBuilder b(op, {"common", "norm"}, include);
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.value("hidden", c.hidden).value("vec", c.vec);
  b.value("threads_per_row", c.threads_per_row).value("rows_per_block", c.rows_per_block);
  b.flag("early_params", c.early_params != 0, /*omit_false=*/true);
  b.entry(std::string("kjit::norm::") + kernel);
  return b.build();
}

}  // namespace

namespace norm_detail {

void row_shape(int n_vec, int vec, int64_t rows, const NormTuning& tuning, int& threads_per_row,
               int& rows_per_block) {
  if (n_vec <= 32) {
    // Tiny rows: a power-of-two slice of a warp per row, 128-thread blocks. bf16 hidden 128 went
    // from 2.93 TB/s (a warp per row) to 4.27 TB/s on the H200 with 16 threads x 8 rows.
    int t = 1;
    while (t < n_vec) t *= 2;
    threads_per_row = t;
    rows_per_block = 128 / t;
  } else if (n_vec <= 128) {
    // A warp per row, no __syncthreads; 4 rows per block keeps blocks at 128 threads.
    threads_per_row = 32;
    rows_per_block = 4;
  } else {
    // One row per block with ~4 vectors per thread (16-byte vectors) or ~8 elements (scalar):
    // enough loads in flight per thread to cover HBM latency while several blocks fit per SM.
    // bf16 2048 measured 3.85 TB/s as a warp per row and 4.23 TB/s as 64 threads per row.
    // Decode sizes: one vector a thread (see the declaration).
    int per_thread = vec == 1 ? 8 : 4;
    if (tuning.vectors_per_thread > 0) {
      per_thread = tuning.vectors_per_thread;
    } else if (rows <= kNormDecodeGeometryMaxRows) {
      per_thread = 1;
    }
    int t = (n_vec + per_thread - 1) / per_thread;
    t = (t + 31) / 32 * 32;
    threads_per_row = t < 64 ? 64 : (t > 1024 ? 1024 : t);
    rows_per_block = 1;
  }
}

void check_eps(float eps) {
  if (!std::isfinite(eps) || eps < 0.0f) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "eps must be finite and >= 0, got {}", eps);
  }
}

void check_same_shape(const DLTensor* a, const char* an, const DLTensor* b, const char* bn) {
  if (b->ndim != a->ndim) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has ndim {} but {} has {}", bn, b->ndim, an, a->ndim);
  }
  for (int i = 0; i < a->ndim; ++i) {
    if (b->shape[i] != a->shape[i]) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} dim {} is {} but {} dim {} is {}", bn, i, b->shape[i],
           an, i, a->shape[i]);
    }
  }
}

void check_param_vector(const DLTensor* t, const RowMatrix& m, const char* name, int64_t hidden) {
  if (t->ndim != 1 || m.cols != hidden) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{} must be [hidden={}], got ndim {} with {} elements", name,
         hidden, t->ndim, m.numel());
  }
}

void launch_rows(const jit::LoadedKernel& k, int threads_per_row, int rows_per_block, int64_t rows,
                 int device, void* stream, const void* params, const ElementwiseLaunch& launch) {
  cuda::LaunchConfig lc;
  lc.grid_x = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
  lc.block_x = static_cast<unsigned>(threads_per_row * rows_per_block);
  lc.stream = static_cast<CUstream>(stream);
  cuda::ScopedDevice scope(device);
  launch_elementwise(k.functions.at(0), lc, params, device, launch);
}

bool any_overlap(const RowMatrix& a, const RowMatrix& b) {
  // partially_overlaps() lets the exact same view through (that is in-place); here it counts.
  return partially_overlaps(a, b) || (a.numel() > 0 && b.numel() > 0 && a.data == b.data);
}

}  // namespace norm_detail

RmsNormConfig select_rmsnorm(DType dtype, int64_t hidden, int align_bytes, int64_t rows,
                             const NormTuning& tuning) {
  return select_row_norm("rmsnorm", dtype, hidden, align_bytes, rows, tuning);
}

RmsNormConfig select_fused_add_rmsnorm(DType dtype, int64_t hidden, int align_bytes, int64_t rows,
                                       const NormTuning& tuning) {
  return select_row_norm("fused_add_rmsnorm", dtype, hidden, align_bytes, rows, tuning);
}

std::string rmsnorm_uri(const RmsNormConfig& c) {
  return rmsnorm_spec(c).uri;
}

jit::Spec rmsnorm_spec(const RmsNormConfig& c) {
  return row_norm_spec("rmsnorm", "norm/rmsnorm.cuh", "rmsnorm_kernel", c);
}

std::string fused_add_rmsnorm_uri(const RmsNormConfig& c) {
  return fused_add_rmsnorm_spec(c).uri;
}

jit::Spec fused_add_rmsnorm_spec(const RmsNormConfig& c) {
  return row_norm_spec("fused_add_rmsnorm", "norm/fused_add_rmsnorm.cuh",
                       "fused_add_rmsnorm_kernel", c);
}

void rmsnorm(const DLTensor* input, const DLTensor* weight, DLTensor* out, float eps, void* stream,
             float weight_offset, const ElementwiseLaunch& launch, const NormTuning& tuning) {
  RowMatrix x = as_row_matrix(input, "input");
  RowMatrix w = as_row_matrix(weight, "weight");
  RowMatrix y = as_row_matrix(out, "out");
  check_same_dtype(x, "input", w, "weight");
  check_same_dtype(x, "input", y, "out");
  check_same_device(x, "input", w, "weight");
  check_same_device(x, "input", y, "out");
  norm_detail::check_param_vector(weight, w, "weight", x.cols);
  norm_detail::check_same_shape(input, "input", out, "out");
  norm_detail::check_eps(eps);
  if (partially_overlaps(x, y)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps input without being the same view");
  }
  if (norm_detail::any_overlap(y, w)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps weight");
  if (x.numel() == 0) return;  // after validation: a zero-size call is still checked
  int align = row_alignment(x);
  align = std::min(align, row_alignment(y));
  align = std::min(align, row_alignment(w));
  RmsNormConfig cfg = select_rmsnorm(x.dtype, x.cols, align, x.rows, tuning);
  if (trace::enabled()) trace::rmsnorm(x.dtype, x.cols, x.rows, weight_offset != 0.0f);

  const jit::LoadedKernel& k = jit::JitCore::global().kernel_for("rmsnorm", cfg, x.device,
                                                                 [&] { return rmsnorm_spec(cfg); });
  norm::RmsNormParams p{x.data,       w.data,       y.data, x.rows,
                        x.row_stride, y.row_stride, eps,    weight_offset};
  norm_detail::launch_rows(k, cfg.threads_per_row, cfg.rows_per_block, x.rows, x.device, stream, &p,
                           launch);
}

void fused_add_rmsnorm(DLTensor* input, DLTensor* residual, const DLTensor* weight, float eps,
                       void* stream, float weight_offset, const ElementwiseLaunch& launch,
                       const NormTuning& tuning) {
  RowMatrix x = as_row_matrix(input, "input");
  RowMatrix r = as_row_matrix(residual, "residual");
  RowMatrix w = as_row_matrix(weight, "weight");
  check_same_dtype(x, "input", r, "residual");
  check_same_dtype(x, "input", w, "weight");
  check_same_device(x, "input", r, "residual");
  check_same_device(x, "input", w, "weight");
  norm_detail::check_same_shape(input, "input", residual, "residual");
  norm_detail::check_param_vector(weight, w, "weight", x.cols);
  norm_detail::check_eps(eps);
  // Both are read and written, so no overlap at all, not even the same view.
  if (norm_detail::any_overlap(x, r)) fail(KJIT_ERROR_INVALID_ARGUMENT, "residual overlaps input");
  if (norm_detail::any_overlap(x, w)) fail(KJIT_ERROR_INVALID_ARGUMENT, "input overlaps weight");
  if (norm_detail::any_overlap(r, w)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "residual overlaps weight");
  }
  if (x.numel() == 0) return;  // after validation: a zero-size call is still checked
  int align = row_alignment(x);
  align = std::min(align, row_alignment(r));
  align = std::min(align, row_alignment(w));
  RmsNormConfig cfg = select_fused_add_rmsnorm(x.dtype, x.cols, align, x.rows, tuning);
  if (trace::enabled()) trace::fused_add_rmsnorm(x.dtype, x.cols, x.rows, weight_offset != 0.0f);

  const jit::LoadedKernel& k = jit::JitCore::global().kernel_for(
      "fused_add_rmsnorm", cfg, x.device, [&] { return fused_add_rmsnorm_spec(cfg); });
  norm::FusedAddRmsNormParams p{x.data,       r.data,       w.data, x.rows,
                                x.row_stride, r.row_stride, eps,    weight_offset};
  norm_detail::launch_rows(k, cfg.threads_per_row, cfg.rows_per_block, x.rows, x.device, stream, &p,
                           launch);
}

}  // namespace kjit::ops
