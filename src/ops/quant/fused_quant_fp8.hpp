// fp8 quantization fused into its producer (kjit_rmsnorm_quant_fp8,
// kjit_fused_add_rmsnorm_quant_fp8, kjit_silu_and_mul_quant_fp8): validation, spec and launch
// (device code: kernels/quant/fused_quant_fp8.cuh). The registry entries are in
// fused_quant_desc.cpp.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

#include "jit/spec.hpp"
#include "ops/dtype.hpp"
#include "ops/pdl.hpp"

namespace kjit::ops {

// rmsnorm_quant_fp8: the input dtype, the vector width (elements per access, from the
// alignment and hidden) and whether the residual add runs first.
struct RmsNormQuantConfig {
  DType dtype = DType::kBF16;
  int vec = 1;
  int residual = 0;  // 0 / 1 (an int: a dispatch config's bytes are its key, so no padding)
};

// Throws KJIT_ERROR_UNSUPPORTED for dtypes other than bf16 / fp16 and sizes past one launch.
// `align` is the smallest byte alignment of the rows involved (ops::row_alignment).
RmsNormQuantConfig select_rmsnorm_quant_fp8(DType dtype, int64_t rows, int64_t hidden, int align,
                                            bool residual);
jit::Spec rmsnorm_quant_fp8_spec(const RmsNormQuantConfig& cfg);

// silu_and_mul_quant_fp8: the input dtype is the whole specialization.
jit::Spec silu_and_mul_quant_fp8_spec(DType dtype);
// Throws KJIT_ERROR_UNSUPPORTED for dtypes other than bf16 / fp16 and sizes past one launch.
void check_silu_and_mul_quant_fp8(DType dtype, int64_t rows, int64_t d);

// The C entry points' ops (kjit.h); residual is null for kjit_rmsnorm_quant_fp8. Throw
// kjit::Error. `launch`: as the other elementwise ops (programmatic dependent launch).
void rmsnorm_quant_fp8(const DLTensor* input, const DLTensor* weight, DLTensor* residual,
                       DLTensor* out, DLTensor* scale, float eps, void* stream,
                       const ElementwiseLaunch& launch = elementwise_launch_from_env());
void silu_and_mul_quant_fp8(const DLTensor* input, DLTensor* out, DLTensor* scale, void* stream,
                            const ElementwiseLaunch& launch = elementwise_launch_from_env());

}  // namespace kjit::ops
