// The fp8 quantization's descriptor: the registry entry (OpDef), the definition at given const
// axes, and the KJIT_TRACE_DUMP hook the op calls after validation.
#pragma once

#include <cstdint>

#include "diag/definition.hpp"
#include "diag/trace_dump.hpp"
#include "ops/dtype.hpp"
#include "ops/quant/quant_fp8.hpp"
#include "ops/registry.hpp"

namespace kjit::ops {

OpDef quant_fp8_op_def();

// kjit_quant_fp8 of an input [m, k] (m the var axis) with `scaling`'s scale layout.
Definition quant_fp8_definition(DType dtype, QuantScaling scaling, int64_t k);

namespace trace {
void quant_fp8(DType dtype, QuantScaling scaling, int64_t m, int64_t k) noexcept;
}  // namespace trace

}  // namespace kjit::ops
