// Dynamic fp8 quantization (kjit_quant_fp8): validation, spec and launch (device code:
// kernels/quant/quant_fp8.cuh). The registry entry is in quant_desc.cpp.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

#include "jit/spec.hpp"
#include "kjit/kjit.h"
#include "ops/dtype.hpp"

namespace kjit::ops {

enum class QuantScaling { kTensor = 0, kRow = 1, kGroup = 2 };  // kjit_fp8_scaling's values

const char* quant_scaling_name(QuantScaling s);  // "tensor", "row", "group"
// The inverse (for --set values); throws KJIT_ERROR_INVALID_ARGUMENT on other text.
QuantScaling quant_scaling_from_name(const std::string& name);

// One compiled variant; both fields are in the URI. Per tensor has two kernels (amax, convert).
struct QuantFp8Config {
  DType dtype = DType::kBF16;  // input
  QuantScaling scaling = QuantScaling::kTensor;
};

// Throws KJIT_ERROR_UNSUPPORTED for inputs other than bf16 / fp16 and sizes past one launch's
// blocks.
QuantFp8Config select_quant_fp8(DType dtype, QuantScaling scaling, int64_t rows, int64_t cols);

jit::Spec quant_fp8_spec(const QuantFp8Config& cfg);

// kjit_quant_fp8 (kjit.h): validates, then launches on `stream`. Throws kjit::Error.
void quant_fp8(const DLTensor* input, DLTensor* out, DLTensor* scale, kjit_fp8_scaling scaling,
               void* stream);

}  // namespace kjit::ops
