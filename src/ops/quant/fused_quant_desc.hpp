// The fused fp8 quantizations' registry entries (OpDefs): rmsnorm_quant_fp8 (with or without the
// residual add) and silu_and_mul_quant_fp8, with their definitions (no trace hooks yet).
#pragma once

#include "ops/registry.hpp"

namespace kjit::ops {

OpDef rmsnorm_quant_fp8_op_def();
OpDef silu_and_mul_quant_fp8_op_def();

}  // namespace kjit::ops
