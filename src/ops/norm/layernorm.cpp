#include "ops/norm/layernorm.hpp"

#include <algorithm>

#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "runtime/jit_core.hpp"
#include "norm/norm_params.h"
#include "ops/norm/norm.hpp"
#include "ops/norm/norm_desc.hpp"
#include "ops/pdl.hpp"
#include "util/error.hpp"

namespace kjit::ops {

LayerNormConfig select_layernorm(DType dtype, DType param_dtype, int64_t hidden, int align_bytes,
                                 int param_align_bytes, int64_t rows, const NormTuning& tuning) {
  if (!is_float(dtype)) {
    fail(KJIT_ERROR_UNSUPPORTED, "layernorm supports fp32, fp16 and bf16, not {}",
         dtype_name(dtype));
  }
  // fp32 parameters beside 16-bit activations are common (mixed-precision checkpoints); other
  // mixes are not, and each would be another set of specializations.
  if (param_dtype != dtype && param_dtype != DType::kF32) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "layernorm takes gamma/beta in the input dtype ({}) or fp32, not {}", dtype_name(dtype),
         dtype_name(param_dtype));
  }
  if (hidden < 1 || hidden > kLayerNormMaxHidden) {
    fail(KJIT_ERROR_UNSUPPORTED, "layernorm supports hidden sizes 1..{}, not {}",
         kLayerNormMaxHidden, hidden);
  }
  LayerNormConfig c;
  c.dtype = dtype;
  c.param_dtype = param_dtype;
  c.hidden = static_cast<int>(hidden);
  const int elem = static_cast<int>(dtype_size(dtype));
  const int pelem = static_cast<int>(dtype_size(param_dtype));
  // As for RMSNorm: the widest vector every pointer allows, down to scalar. A parameter vector
  // is read in accesses of at most 16 bytes, so that is all it needs to be aligned to.
  c.vec = 16 / elem;
  while (c.vec > 1 && (c.hidden % c.vec != 0 || c.vec * elem > align_bytes ||
                       std::min(c.vec * pelem, 16) > param_align_bytes)) {
    c.vec /= 2;
  }
  norm_detail::row_shape(c.hidden / c.vec, c.vec, rows, tuning, c.threads_per_row,
                         c.rows_per_block);
  c.early_params = rows <= kNormEarlyParamsMaxRows ? 1 : 0;
  return c;
}

std::string layernorm_uri(const LayerNormConfig& c) {
  return layernorm_spec(c).uri;
}

// One name a setting, from the config field to the kernel's template parameter (in upper case).
jit::Spec layernorm_spec(const LayerNormConfig& c) {
  jit::SpecBuilder b("layernorm", {"common", "norm"}, "norm/layernorm.cuh");
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.type("param_dtype", dtype_name(c.param_dtype), device_type_name(c.param_dtype));
  b.value("hidden", c.hidden).value("vec", c.vec);
  b.value("threads_per_row", c.threads_per_row).value("rows_per_block", c.rows_per_block);
  b.flag("early_params", c.early_params != 0, /*omit_false=*/true);
  b.entry("kjit::norm::layernorm_kernel");
  return b.build();
}

void layernorm(const DLTensor* input, const DLTensor* gamma, const DLTensor* beta, DLTensor* out,
               float eps, void* stream, const ElementwiseLaunch& launch, const NormTuning& tuning) {
  RowMatrix x = as_row_matrix(input, "input");
  RowMatrix g = as_row_matrix(gamma, "gamma");
  RowMatrix b = as_row_matrix(beta, "beta");
  RowMatrix y = as_row_matrix(out, "out");
  check_same_dtype(x, "input", y, "out");
  // gamma's dtype against input's is a support question (select_layernorm); beta must match it.
  check_same_dtype(g, "gamma", b, "beta");
  check_same_device(x, "input", g, "gamma");
  check_same_device(x, "input", b, "beta");
  check_same_device(x, "input", y, "out");
  norm_detail::check_param_vector(gamma, g, "gamma", x.cols);
  norm_detail::check_param_vector(beta, b, "beta", x.cols);
  norm_detail::check_same_shape(input, "input", out, "out");
  norm_detail::check_eps(eps);
  if (partially_overlaps(x, y)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps input without being the same view");
  }
  if (norm_detail::any_overlap(y, g)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps gamma");
  if (norm_detail::any_overlap(y, b)) fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps beta");
  if (x.numel() == 0) return;  // after validation: a zero-size call is still checked
  const int align = std::min(row_alignment(x), row_alignment(y));
  const int param_align = std::min(row_alignment(g), row_alignment(b));
  LayerNormConfig cfg =
      select_layernorm(x.dtype, g.dtype, x.cols, align, param_align, x.rows, tuning);
  if (trace::enabled()) trace::layernorm(x.dtype, g.dtype, x.cols, x.rows);

  const jit::LoadedKernel& k = jit::JitCore::global().kernel_for(
      "layernorm", cfg, x.device, [&] { return layernorm_spec(cfg); });
  norm::LayerNormParams p{x.data, g.data, b.data, y.data, x.rows, x.row_stride, y.row_stride, eps};
  norm_detail::launch_rows(k, cfg.threads_per_row, cfg.rows_per_block, x.rows, x.device, stream, &p,
                           launch);
}

}  // namespace kjit::ops
