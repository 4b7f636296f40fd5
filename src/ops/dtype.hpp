// The element types kjit's ops accept, and their one spelling in text (URIs, --set values, logs).
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <optional>
#include <string_view>

namespace kjit::ops {

// kE4M3: float8_e4m3fn (DLPack 1.1's kDLFloat8_e4m3fn, KJIT_DL_FLOAT8_E4M3FN in kjit.h), the fp8
// GEMM's operands and the fp8 quantization's output; no other op takes it.
enum class DType { kF32, kF16, kBF16, kI32, kI64, kE4M3 };

std::optional<DType> dtype_of(DLDataType t);
const char* dtype_name(DType t);  // "fp32", "fp16", "bf16", "int32", "int64", "e4m3"
// The inverse of dtype_name, for --set values and URIs; throws KJIT_ERROR_INVALID_ARGUMENT on
// any other text.
DType dtype_from_name(std::string_view name);
size_t dtype_size(DType t);
// The CUDA spelling of fp32 / fp16 / bf16 for generated code ("__nv_bfloat16"); nullptr otherwise.
const char* device_type_name(DType t);
bool is_float(DType t);  // fp32, fp16 or bf16

}  // namespace kjit::ops
