// The fused fp8 quantizations' registry entries (OpDefs): rmsnorm_quant_fp8 (with or without the
// residual add) and silu_and_mul_quant_fp8, with their definitions and the KJIT_TRACE_DUMP hooks
// the ops call after validation.
#pragma once

#include <cstdint>

#include "diag/trace_dump.hpp"
#include "ops/dtype.hpp"
#include "ops/registry.hpp"

namespace kjit::ops {

OpDef rmsnorm_quant_fp8_op_def();
OpDef silu_and_mul_quant_fp8_op_def();

namespace trace {
// kjit_rmsnorm_quant_fp8 (residual: kjit_fused_add_rmsnorm_quant_fp8) of [m, hidden].
void rmsnorm_quant_fp8(DType dtype, bool residual, int64_t m, int64_t hidden) noexcept;
// kjit_silu_and_mul_quant_fp8 of [m, 2 d].
void silu_and_mul_quant_fp8(DType dtype, int64_t m, int64_t d) noexcept;
}  // namespace trace

}  // namespace kjit::ops
