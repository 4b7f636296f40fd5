#include "ops/dtype.hpp"

#include "kjit/kjit.h"
#include "util/error.hpp"

namespace kjit::ops {

std::optional<DType> dtype_of(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  if (t.code == kDLFloat && t.bits == 32) return DType::kF32;
  if (t.code == kDLFloat && t.bits == 16) return DType::kF16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::kBF16;
  if (t.code == kDLInt && t.bits == 32) return DType::kI32;
  if (t.code == kDLInt && t.bits == 64) return DType::kI64;
  if (t.code == KJIT_DL_FLOAT8_E4M3FN && t.bits == 8) return DType::kE4M3;
  return std::nullopt;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kE4M3: return "e4m3";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kE4M3: return 1;
  }
  return 0;
}

const char* device_type_name(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kF16: return "__half";
    case DType::kBF16: return "__nv_bfloat16";
    default: return nullptr;
  }
}

bool is_float(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

DType dtype_from_name(std::string_view name) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kE4M3}) {
    if (name == dtype_name(t)) return t;
  }
  fail(KJIT_ERROR_INVALID_ARGUMENT, "unknown dtype '{}'", name);
}

}  // namespace kjit::ops
