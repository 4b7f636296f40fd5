#include "ops/quant/fused_quant_fp8.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/launch.hpp"
#include "ops/norm/norm.hpp"
#include "ops/quant/fused_quant_desc.hpp"
#include "ops/tensor.hpp"
#include "quant/quant_params.h"
#include "runtime/jit_core.hpp"
#include "util/error.hpp"
#include "util/math.hpp"

namespace kjit::ops {

using util::ceil_div;

namespace {

constexpr int64_t kMaxGrid = (int64_t{1} << 31) - 1;
const std::vector<std::string> kFolders = {"common", "norm", "activation", "quant"};
constexpr const char* kInclude = "quant/fused_quant_fp8.cuh";

void check_dtype(const char* op, DType dtype) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    fail(KJIT_ERROR_UNSUPPORTED, "{}: input is bf16 or fp16, not {}", op, dtype_name(dtype));
  }
}

void check_codes(const RowMatrix& y) {
  if (y.dtype != DType::kE4M3) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out must be float8_e4m3fn, not {}", dtype_name(y.dtype));
  }
}

// scale: fp32, compact, `shape`; and apart from every other tensor of the call.
void check_scale(const DLTensor* scale, const RowMatrix& s, std::initializer_list<int64_t> shape,
                 std::initializer_list<const RowMatrix*> others) {
  if (s.dtype != DType::kF32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "scale must be fp32, not {}", dtype_name(s.dtype));
  }
  if (scale->ndim != static_cast<int>(shape.size()) ||
      !std::equal(shape.begin(), shape.end(), scale->shape)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "scale must be [{}]", fmt::join(shape, ", "));
  }
  if (s.rows > 1 && s.row_stride != s.cols) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "scale must be compact (row stride {}, {} columns)",
         s.row_stride, s.cols);
  }
  for (const RowMatrix* o : others) {
    if (s.numel() != 0 && o->numel() != 0 && norm_detail::any_overlap(s, *o)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "scale overlaps another tensor of the call");
    }
  }
}

cuda::LaunchConfig launch_config(void* stream, int64_t blocks) {
  cuda::LaunchConfig lc;
  lc.stream = static_cast<CUstream>(stream);
  lc.block_x = quant::kQuantThreads;
  lc.grid_x = static_cast<unsigned>(blocks);
  return lc;
}

}  // namespace

RmsNormQuantConfig select_rmsnorm_quant_fp8(DType dtype, int64_t rows, int64_t hidden, int align,
                                            bool residual) {
  check_dtype("rmsnorm_quant_fp8", dtype);
  if (rows > kMaxGrid || hidden > kMaxGrid) {
    fail(KJIT_ERROR_UNSUPPORTED, "rmsnorm_quant_fp8: {} rows of {} exceed one launch", rows,
         hidden);
  }
  // The widest vector the byte alignment of every row (and of the codes' rows, a vector's
  // bytes) allows: 16-byte loads of bf16 at 8.
  int vec = 8;
  while (vec > 1 && (hidden % vec != 0 || align % (vec * 2) != 0)) vec /= 2;
  return RmsNormQuantConfig{dtype, vec, residual ? 1 : 0};
}

jit::Spec rmsnorm_quant_fp8_spec(const RmsNormQuantConfig& c) {
  jit::SpecBuilder b("rmsnorm_quant_fp8", kFolders, kInclude);
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.value("vec", c.vec);
  b.flag("residual", c.residual != 0);
  b.entry("kjit::quant::rmsnorm_quant_fp8_kernel", {"dtype", "vec", "residual"});
  return b.build();
}

jit::Spec silu_and_mul_quant_fp8_spec(DType dtype) {
  jit::SpecBuilder b("silu_and_mul_quant_fp8", kFolders, kInclude);
  b.type("dtype", dtype_name(dtype), device_type_name(dtype));
  b.entry("kjit::quant::silu_and_mul_quant_fp8_kernel", {"dtype"});
  return b.build();
}

void check_silu_and_mul_quant_fp8(DType dtype, int64_t rows, int64_t d) {
  check_dtype("silu_and_mul_quant_fp8", dtype);
  const int64_t groups = ceil_div(d, quant::kQuantGroup);
  if (ceil_div(rows, quant::kQuantThreads / 32) > kMaxGrid / std::max<int64_t>(groups, 1)) {
    fail(KJIT_ERROR_UNSUPPORTED, "silu_and_mul_quant_fp8: {} rows of {} exceed one launch", rows,
         d);
  }
}

void rmsnorm_quant_fp8(const DLTensor* input, const DLTensor* weight, DLTensor* residual,
                       DLTensor* out, DLTensor* scale, float eps, void* stream,
                       const ElementwiseLaunch& launch) {
  const RowMatrix x = as_row_matrix(input, "input");
  const RowMatrix w = as_row_matrix(weight, "weight");
  const RowMatrix y = as_row_matrix(out, "out");
  const RowMatrix s = as_row_matrix(scale, "scale");
  RowMatrix r;
  if (residual != nullptr) {
    r = as_row_matrix(residual, "residual");
    check_same_dtype(x, "input", r, "residual");
    check_same_device(x, "input", r, "residual");
    norm_detail::check_same_shape(input, "input", residual, "residual");
  }
  check_same_dtype(x, "input", w, "weight");
  check_same_device(x, "input", w, "weight");
  check_same_device(x, "input", y, "out");
  check_same_device(x, "input", s, "scale");
  norm_detail::check_param_vector(weight, w, "weight", x.cols);
  norm_detail::check_same_shape(input, "input", out, "out");
  norm_detail::check_eps(eps);
  check_codes(y);
  check_scale(scale, s, {x.rows}, {&x, &w, &y, &r});
  if (y.numel() != 0 && (norm_detail::any_overlap(y, x) || norm_detail::any_overlap(y, w) ||
                         (residual != nullptr && norm_detail::any_overlap(y, r)))) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps input, weight or residual");
  }
  if (residual != nullptr && x.numel() != 0 &&
      (norm_detail::any_overlap(r, x) || norm_detail::any_overlap(r, w))) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "residual overlaps input or weight");
  }
  if (x.numel() == 0) return;  // after validation: a zero-size call is still checked
  int align = std::min({row_alignment(x), row_alignment(w), row_alignment(y) * 2});
  if (residual != nullptr) align = std::min(align, row_alignment(r));
  const RmsNormQuantConfig cfg =
      select_rmsnorm_quant_fp8(x.dtype, x.rows, x.cols, align, residual != nullptr);
  if (trace::enabled()) trace::rmsnorm_quant_fp8(x.dtype, residual != nullptr, x.rows, x.cols);
  const jit::LoadedKernel& kern = jit::JitCore::global().kernel_for(
      "rmsnorm_quant_fp8", cfg, x.device, [&] { return rmsnorm_quant_fp8_spec(cfg); });
  quant::RmsNormQuantFp8Params p{};
  p.input = x.data;
  p.weight = w.data;
  p.residual = residual != nullptr ? r.data : nullptr;
  p.out = y.data;
  p.scale = static_cast<float*>(s.data);
  p.rows = x.rows;
  p.hidden = x.cols;
  p.in_stride = x.row_stride;
  p.res_stride = residual != nullptr ? r.row_stride : 0;
  p.out_stride = y.row_stride;
  p.eps = eps;
  cuda::ScopedDevice scope(x.device);
  launch_elementwise(kern.functions.at(0), launch_config(stream, x.rows), &p, x.device, launch);
}

void silu_and_mul_quant_fp8(const DLTensor* input, DLTensor* out, DLTensor* scale, void* stream,
                            const ElementwiseLaunch& launch) {
  const RowMatrix x = as_row_matrix(input, "input");
  const RowMatrix y = as_row_matrix(out, "out");
  const RowMatrix s = as_row_matrix(scale, "scale");
  check_same_device(x, "input", y, "out");
  check_same_device(x, "input", s, "scale");
  check_codes(y);
  if (x.cols % 2 != 0) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "input's last dim must be even ([gate | up]), not {}",
         x.cols);
  }
  const int64_t d = x.cols / 2;
  if (out->ndim != input->ndim ||
      !std::equal(input->shape, input->shape + input->ndim - 1, out->shape) ||
      out->shape[out->ndim - 1] != d) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out must be input's shape with the last dim halved ({})", d);
  }
  const int64_t groups = ceil_div(d, quant::kQuantGroup);
  check_scale(scale, s, {x.rows, groups}, {&x, &y});
  if (y.numel() != 0 && norm_detail::any_overlap(x, y)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps input");
  }
  if (x.numel() == 0) return;  // after validation: a zero-size call is still checked
  check_silu_and_mul_quant_fp8(x.dtype, x.rows, d);
  if (trace::enabled()) trace::silu_and_mul_quant_fp8(x.dtype, x.rows, d);
  const jit::LoadedKernel& kern =
      jit::JitCore::global().kernel_for("silu_and_mul_quant_fp8", x.dtype, x.device,
                                        [&] { return silu_and_mul_quant_fp8_spec(x.dtype); });
  quant::ActQuantFp8Params p{};
  p.input = x.data;
  p.out = y.data;
  p.scale = static_cast<float*>(s.data);
  p.rows = x.rows;
  p.d = d;
  p.in_stride = x.row_stride;
  p.out_stride = y.row_stride;
  p.groups = groups;
  cuda::ScopedDevice scope(x.device);
  launch_elementwise(kern.functions.at(0),
                     launch_config(stream, ceil_div(x.rows * groups, quant::kQuantThreads / 32)),
                     &p, x.device, launch);
}

}  // namespace kjit::ops
