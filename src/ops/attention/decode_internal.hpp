// Helpers the decode attention sources share (decode_plan.cpp, decode_run.cpp,
// decode_spec.cpp); not part of the ops API.
#pragma once

#include <dlpack/dlpack.h>

#include <string>

#include "ops/attention/decode_attention.hpp"
#include "ops/attention/decode_tactics.hpp"

namespace kjit::ops::decode_detail {

constexpr int kDLFloat8E4m3fn = 10;  // DLPack 1.1's kDLFloat8_e4m3fn (not in older headers)

// fp8 e4m3 as DLPack 1.1 names it, or as 8-bit unsigned bytes.
bool is_e4m3(DLDataType t);
// "bf16", "fp8 e4m3", or the raw code for messages.
std::string dl_name(DLDataType t);

// Applies a tactic's CTA fields and merge to the selected variant (pl.cfg, pl.ctas_per_sm,
// pl.fused_merge, pl.pdl), checking that the kernel's static requirements hold and that the CTA
// fits the device.
void apply_tactic(DecodePlanData& pl, const DecodeTactic& t, const SmemBudget& budget);

}  // namespace kjit::ops::decode_detail
