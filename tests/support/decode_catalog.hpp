// The decode kernels' compile check (dense gemm_decode_sm90.cuh / gemm_fp8_decode_sm90.cuh and
// the grouped moe_gemm_decode_sm90.cuh): every catalog row of an op that a key selects, built by
// NVRTC for sm_90a into a fresh cache, with no local memory (no spill), no TMA coordinate under a
// spent elect-loop predicate (sass_scan.hpp), and registers within the 64K of an SM for
// blocks_per_sm(tokens) blocks of kGemmDecodeThreads (ptxas spreads each block's 9 warps over 4
// schedulers: 96 a thread at two blocks, else the 224 of one).
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "jit/arch.hpp"
#include "jit/cubin_info.hpp"
#include "jit/settings.hpp"
#include "ops/registry.hpp"
#include "runtime/jit_core.hpp"
#include "support/sass_scan.hpp"
#include "support/temp_dir.hpp"

namespace kjit::test {

// Rows of `op` whose `key` is `value` (any value where null) and, where a row names them, whose
// dtype and out_dtype are bf16 when bf16_only (fp16 and an fp32 out change no register's life,
// and every spec here is a fresh NVRTC compile); at least min_built of them.
inline void check_decode_catalog(const char* op, const char* key, const char* value,
                                 int (*blocks_per_sm)(int tokens), int min_built = 9,
                                 bool bf16_only = false) {
  const auto bf16 = [](const ops::SetArgs& set, const char* k) {
    return set.count(k) == 0 || set.at(k) == "bf16";
  };
  TempDir dir;  // a fresh cache: every spec compiles here
  jit::Settings s;
  s.cache_dir = dir.path() / "cache";
  s.gen_dir = s.cache_dir / "generated";
  jit::JitCore core(s);
  const ops::OpDef& d = ops::op_or_throw(op);
  int built = 0;
  for (const ops::SetArgs& set : d.catalog()) {
    if (set.count(key) == 0 || (value != nullptr && set.at(key) != value)) continue;
    if (bf16_only && !(bf16(set, "dtype") && bf16(set, "out_dtype"))) continue;
    const jit::Spec spec = d.make_spec(set);
    INFO(spec.uri);
    const jit::Artifact a = core.build(spec, jit::ArchTarget{9, 0, true});
    REQUIRE(a.meta.lowered_names.size() == 1);
    const std::string& name = a.meta.lowered_names[0].second;
    const jit::CubinKernelInfo info = jit::cubin_kernel_info(a.cubin, name);
    const int tokens = std::stoi(set.at("tokens"));
    INFO(info.registers << " registers");
    CHECK(info.registers > 0);
    CHECK(info.registers <= (blocks_per_sm(tokens) == 2 ? 96 : 224));
    const std::string code = jit::cubin_kernel_code(a.cubin, name);
    CHECK(local_memory_ops(code) == 0);
    CHECK(tma_coordinate_under_spent_predicate(code) == 0);
    ++built;
  }
  CHECK(built >= min_built);
}

}  // namespace kjit::test
