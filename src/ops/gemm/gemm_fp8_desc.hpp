// The fp8 GEMM's descriptor: everything about kjit_gemm_fp8 besides running it (as gemm_desc.hpp
// for kjit_gemm): the registry entry, the definition at given const axes, the KJIT_TRACE_DUMP
// hook.
#pragma once

#include <cstdint>
#include <string>

#include "diag/definition.hpp"
#include "diag/trace_dump.hpp"
#include "ops/dtype.hpp"
#include "ops/gemm/gemm_fp8.hpp"
#include "ops/registry.hpp"

namespace kjit::ops {

OpDef gemm_fp8_op_def();

// The scale modes a definition and `kjit-cli bench gemm_fp8` name: "tensor" (both scales [1]),
// "row" (scale_a [m], scale_b [n]), "block" (DeepSeek-V3's blocks); a call that mixes them traces
// as "mixed", with no bench row. a_per_row / b_per_row: the scale has one value per row (and
// more than one row).
const char* fp8_scale_mode(Fp8Scales scales, bool a_per_row, bool b_per_row, int64_t m, int64_t n);

// kjit_gemm_fp8 with a [m, k] e4m3 (m the var axis), b [n, k] e4m3, scales of `mode`, out [m, n]
// in out_dtype.
Definition gemm_fp8_definition(DType out_dtype, const std::string& mode, int64_t n, int64_t k);

namespace trace {
void gemm_fp8(DType out_dtype, const char* mode, int64_t m, int64_t n, int64_t k) noexcept;
}  // namespace trace

}  // namespace kjit::ops
