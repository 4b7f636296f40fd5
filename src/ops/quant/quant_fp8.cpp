#include "ops/quant/quant_fp8.hpp"

#include <algorithm>
#include <string>

#include "cuda/device.hpp"
#include "cuda/driver.hpp"
#include "cuda/launch.hpp"
#include "ops/quant/quant_desc.hpp"
#include "ops/tensor.hpp"
#include "quant/quant_params.h"
#include "runtime/jit_core.hpp"
#include "util/error.hpp"
#include "util/math.hpp"

namespace kjit::ops {

using util::ceil_div;

namespace {

constexpr QuantScaling kScalings[] = {QuantScaling::kTensor, QuantScaling::kRow,
                                      QuantScaling::kGroup};

// Per tensor: blocks enough to fill the device a few times over; each walks rows.
constexpr int64_t kTensorBlocksPerSm = 4;

}  // namespace

const char* quant_scaling_name(QuantScaling s) {
  switch (s) {
    case QuantScaling::kTensor: return "tensor";
    case QuantScaling::kRow: return "row";
    case QuantScaling::kGroup: return "group";
  }
  return "?";
}

QuantScaling quant_scaling_from_name(const std::string& name) {
  for (QuantScaling s : kScalings) {
    if (name == quant_scaling_name(s)) return s;
  }
  fail(KJIT_ERROR_INVALID_ARGUMENT, "unknown fp8 scaling '{}' (tensor, row, group)", name);
}

QuantFp8Config select_quant_fp8(DType dtype, QuantScaling scaling, int64_t rows, int64_t cols) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    fail(KJIT_ERROR_UNSUPPORTED, "quant_fp8: input is bf16 or fp16, not {}", dtype_name(dtype));
  }
  constexpr int64_t kMaxGrid = (int64_t{1} << 31) - 1;
  const int64_t groups = ceil_div(cols, quant::kQuantGroup);
  if ((scaling == QuantScaling::kRow && rows > kMaxGrid) ||
      (scaling == QuantScaling::kGroup &&
       ceil_div(rows, quant::kQuantThreads / 32) > kMaxGrid / std::max<int64_t>(groups, 1))) {
    fail(KJIT_ERROR_UNSUPPORTED, "quant_fp8: {} rows of {} exceed one launch's blocks", rows, cols);
  }
  return QuantFp8Config{dtype, scaling};
}

jit::Spec quant_fp8_spec(const QuantFp8Config& c) {
  jit::SpecBuilder b("quant_fp8", {"common", "quant"}, "quant/quant_fp8.cuh");
  b.type("dtype", dtype_name(c.dtype), device_type_name(c.dtype));
  b.choice("scaling", quant_scaling_name(c.scaling), static_cast<int>(c.scaling));
  switch (c.scaling) {
    case QuantScaling::kTensor:
      b.entry("kjit::quant::quant_fp8_amax_kernel", {"dtype"});
      b.entry("kjit::quant::quant_fp8_tensor_kernel", {"dtype"});
      break;
    case QuantScaling::kRow: b.entry("kjit::quant::quant_fp8_row_kernel", {"dtype"}); break;
    case QuantScaling::kGroup: b.entry("kjit::quant::quant_fp8_group_kernel", {"dtype"}); break;
  }
  return b.build();
}

void quant_fp8(const DLTensor* input, DLTensor* out, DLTensor* scale, kjit_fp8_scaling scaling,
               void* stream) {
  const RowMatrix x = as_row_matrix(input, "input");
  const RowMatrix y = as_row_matrix(out, "out");
  const RowMatrix s = as_row_matrix(scale, "scale");
  if (scaling < KJIT_FP8_PER_TENSOR || scaling > KJIT_FP8_PER_GROUP_128) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "scaling is {} (KJIT_FP8_PER_TENSOR, _PER_ROW or "
         "_PER_GROUP_128)",
         static_cast<int>(scaling));
  }
  const auto sc = static_cast<QuantScaling>(scaling);
  check_same_device(x, "input", y, "out");
  check_same_device(x, "input", s, "scale");
  if (y.dtype != DType::kE4M3) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out must be float8_e4m3fn, not {}", dtype_name(y.dtype));
  }
  if (s.dtype != DType::kF32) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "scale must be fp32, not {}", dtype_name(s.dtype));
  }
  if (out->ndim != input->ndim ||
      !std::equal(input->shape, input->shape + input->ndim, out->shape)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out's shape must be input's");
  }
  // input's rows from its shape (a RowMatrix without columns has none).
  int64_t rows = 1;
  for (int i = 0; i + 1 < input->ndim; ++i) {
    if (__builtin_mul_overflow(rows, input->shape[i], &rows)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "input: its leading dims overflow int64");
    }
  }
  const int64_t cols = input->shape[input->ndim - 1];
  const int64_t groups = ceil_div(cols, quant::kQuantGroup);
  const bool shape_ok = sc == QuantScaling::kTensor ? scale->ndim == 1 && scale->shape[0] == 1
                        : sc == QuantScaling::kRow  ? scale->ndim == 1 && scale->shape[0] == rows
                                                    : scale->ndim == 2 && scale->shape[0] == rows &&
                                                         scale->shape[1] == groups;
  if (!shape_ok) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "scale must be [1] per tensor, [m] = [{}] per row, [m, ceil(k / 128)] = [{}, {}] per "
         "group ({})",
         rows, rows, groups, quant_scaling_name(sc));
  }
  if (s.rows > 1 && s.row_stride != s.cols) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "scale must be compact (row stride {}, {} columns)",
         s.row_stride, s.cols);
  }
  if (y.numel() != 0 && (y.data == x.data || partially_overlaps(x, y))) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "out overlaps input (quant_fp8 is not in place)");
  }
  if (s.numel() != 0 && (partially_overlaps(y, s) || partially_overlaps(x, s))) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "scale overlaps input or out");
  }
  if (rows == 0 || cols == 0) return;  // after validation: a zero-size call is still checked
  const QuantFp8Config cfg = select_quant_fp8(x.dtype, sc, rows, cols);
  if (trace::enabled()) trace::quant_fp8(x.dtype, sc, rows, cols);
  const jit::LoadedKernel& kern = jit::JitCore::global().kernel_for(
      "quant_fp8", cfg, x.device, [&] { return quant_fp8_spec(cfg); });
  quant::QuantFp8Params p{};
  p.in = x.data;
  p.out = y.data;
  p.scale = static_cast<float*>(s.data);
  p.rows = rows;
  p.cols = cols;
  p.in_stride = x.row_stride;
  p.out_stride = y.row_stride;
  p.groups = groups;
  cuda::LaunchConfig lc;
  lc.stream = static_cast<CUstream>(stream);
  lc.block_x = quant::kQuantThreads;
  cuda::ScopedDevice scope(x.device);
  switch (sc) {
    case QuantScaling::kTensor: {
      const int64_t sms = cuda::device_info(x.device).sm_count;
      lc.grid_x =
          static_cast<unsigned>(std::min(rows, kTensorBlocksPerSm * std::max<int64_t>(sms, 1)));
      KJIT_CU_CHECK(cuda::driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(s.data), 0,
                                                   sizeof(float), lc.stream));
      cuda::launch(kern.functions.at(0), lc, &p);
      cuda::launch(kern.functions.at(1), lc, &p);
      break;
    }
    case QuantScaling::kRow:
      lc.grid_x = static_cast<unsigned>(rows);
      cuda::launch(kern.functions.at(0), lc, &p);
      break;
    case QuantScaling::kGroup:
      lc.grid_x = static_cast<unsigned>(ceil_div(rows * groups, quant::kQuantThreads / 32));
      cuda::launch(kern.functions.at(0), lc, &p);
      break;
  }
}

}  // namespace kjit::ops
