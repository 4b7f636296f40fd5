// The decode-shape grouped GEMM (kernels/moe/moe_gemm_decode_sm90.cuh) without a GPU: when the
// selection takes it (host-known bounds only: max_rows of the masked layout, the total rows of
// the contiguous one), its token tile and stages, its specs and registry entries, and every
// specialization the catalogs list compiled by NVRTC for sm_90a with no local memory (no spill)
// and registers within what its blocks per SM leave.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>

#include "gemm/gemm_params.h"
#include "jit/arch.hpp"
#include "moe/moe_params.h"
#include "ops/moe/moe.hpp"
#include "ops/registry.hpp"
#include "support/decode_catalog.hpp"
#include "support/gemm_target.hpp"
#include "util/error.hpp"

using namespace kjit;
using ops::DType;
using ops::GemmPath;

namespace {

ops::GemmTarget h200() {
  return test::h200_gemm_target();
}

// select_moe_gemm of a contiguous call as the op makes it (avg_rows rows / experts).
ops::MoeGemmConfig contiguous(int64_t rows, int64_t n, int64_t k, int64_t experts,
                              const ops::GemmTarget& t = h200()) {
  return ops::select_moe_gemm(DType::kBF16, DType::kBF16, rows, rows / experts, n, k, experts, t,
                              ops::moe_decode_rows(false, rows, 0, experts));
}

}  // namespace

TEST_CASE("moe decode: the rows bound from host-known sizes", "[moe]") {
  // Masked: max_rows itself, up to the widest token tile.
  CHECK(ops::moe_decode_rows(true, 128 * 1, 1, 128) == 1);
  CHECK(ops::moe_decode_rows(true, 8 * 64, 64, 8) == 64);
  CHECK(ops::moe_decode_rows(true, 8 * 65, 65, 8) == 0);
  CHECK(ops::moe_decode_rows(true, 0, 0, 8) == 0);
  // Contiguous: every row fits one tile up to 64 rows.
  CHECK(ops::moe_decode_rows(false, 8, 0, 128) == 8);     // Qwen3-30B-A3B, 1 token
  CHECK(ops::moe_decode_rows(false, 2, 0, 8) == 2);       // Mixtral, 1 token
  CHECK(ops::moe_decode_rows(false, 64, 0, 8) == 64);     // Mixtral, 32 tokens
  CHECK(ops::moe_decode_rows(false, 512, 0, 128) == 16);  // Qwen3, 64 tokens: 4 x 4
  CHECK(ops::moe_decode_rows(false, 128, 0, 8) == 64);    // Mixtral, 64 tokens: 4 x 16
  CHECK(ops::moe_decode_rows(false, 512, 0, 256) == 8);   // DeepSeek-V3, 64 tokens
  CHECK(ops::moe_decode_rows(false, 256, 0, 8) == 0);     // Mixtral, 128 tokens: 32 each
  CHECK(ops::moe_decode_rows(false, 513, 0, 256) == 0);   // past 64 tokens of top 8
  CHECK(ops::moe_decode_rows(false, 32768, 0, 128) == 0);
}

TEST_CASE("moe decode: selection picks the decode kernel for decode shapes only", "[moe]") {
  // Qwen3-30B-A3B gate_up at 1 token: the narrowest tile, the dense decode kernel's stages.
  const ops::MoeGemmConfig q1 = contiguous(8, 1536, 2048, 128);
  CHECK(q1.path == GemmPath::kSm90Decode);
  CHECK(q1.tokens == 16);
  CHECK(q1.stages == ops::gemm_decode_stages(16, h200().max_smem_optin));
  CHECK(contiguous(512, 1536, 2048, 128).tokens == 16);
  const ops::MoeGemmConfig mx64 = contiguous(128, 28672, 4096, 8);
  CHECK(mx64.path == GemmPath::kSm90Decode);
  CHECK(mx64.tokens == 64);
  CHECK(contiguous(40, 28672, 4096, 8).tokens == 64);
  CHECK(contiguous(20, 28672, 4096, 8).tokens == 32);
  // Prefill shapes keep the 128-row tiles.
  CHECK(contiguous(256, 28672, 4096, 8).path == GemmPath::kSm90);
  CHECK(contiguous(32768, 1536, 2048, 128).path == GemmPath::kSm90);
  // Masked: max_rows picks the tile.
  const ops::MoeGemmConfig m =
      ops::select_moe_gemm(DType::kBF16, DType::kF32, 256 * 4, 4, 4096, 7168, 256, h200(),
                           ops::moe_decode_rows(true, 256 * 4, 4, 256));
  CHECK(m.path == GemmPath::kSm90Decode);
  CHECK(m.tokens == 16);
  // Not where it cannot run: no TMA (k * 2 bytes not a multiple of 16), not Hopper.
  ops::GemmTarget untma = h200();
  untma.tma_ok = false;
  CHECK(contiguous(8, 1536, 2044, 128, untma).path == GemmPath::kSimt);
  ops::GemmTarget ampere = h200();
  ampere.cc_major = 8;
  CHECK(contiguous(8, 1536, 2048, 128, ampere).path == GemmPath::kSimt);
  // decode_rows 0 (a forced tile kernel) or past 64: the tile kernel.
  CHECK(ops::select_moe_gemm(DType::kBF16, DType::kBF16, 8, 0, 1536, 2048, 128, h200(), 0).path ==
        GemmPath::kSm90);
  CHECK(ops::select_moe_gemm(DType::kBF16, DType::kBF16, 8, 0, 1536, 2048, 128, h200(), 65).path ==
        GemmPath::kSm90);

  // fp8: the same rule, the e4m3 blocks per SM (one at 64 tokens, so more stages).
  const ops::MoeGemmFp8Config f1 = ops::select_moe_gemm_fp8(
      DType::kBF16, 8, 4096, 7168, 256, false, h200(), ops::moe_decode_rows(false, 8, 0, 256));
  CHECK(f1.tokens == 16);
  CHECK(f1.stages == ops::gemm_decode_stages(16, h200().max_smem_optin, 2));
  const ops::MoeGemmFp8Config f64 =
      ops::select_moe_gemm_fp8(DType::kBF16, 128, 28672, 4096, 8, true, h200(), 64);
  CHECK(f64.tokens == 64);
  CHECK(f64.swiglu == 1);
  CHECK(f64.stages == ops::gemm_decode_stages(64, h200().max_smem_optin, 1));
  CHECK(f64.stages > ops::gemm_decode_stages(64, h200().max_smem_optin, 2));
  CHECK(ops::select_moe_gemm_fp8(DType::kBF16, 32768, 4096, 7168, 256, false, h200(), 0).tokens ==
        0);
}

TEST_CASE("moe decode: specs and registry entries", "[moe]") {
  const ops::MoeGemmConfig q1 = contiguous(8, 1536, 2048, 128);
  const jit::Spec s = ops::moe_gemm_spec(q1);
  CHECK(s.uri.find("decode") != std::string::npos);
  CHECK(s.uri.find("tokens_16") != std::string::npos);
  CHECK(s.arch_families == std::vector<std::string>{"sm_90a"});
  ops::MoeGemmConfig sw = q1;
  sw.swiglu = 1;
  CHECK(ops::moe_gemm_spec(sw).uri != s.uri);
  // The registry's --set form gives the same specialization.
  const ops::OpDef& d = ops::op_or_throw("moe_grouped_gemm");
  CHECK(
      d.make_spec({{"path", "decode"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}, {"tokens", "16"}})
          .uri == s.uri);
  CHECK_THROWS_AS(
      d.make_spec({{"path", "sm90"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}, {"tokens", "16"}}),
      Error);
  CHECK_THROWS_AS(
      d.make_spec({{"path", "decode"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}, {"bn", "128"}}),
      Error);
  // fp8: tokens picks the decode kernel; without it the URIs stay what they were.
  const ops::OpDef& f = ops::op_or_throw("moe_grouped_gemm_fp8");
  const std::string tiles = f.make_spec({{"out_dtype", "bf16"}}).uri;
  CHECK(tiles.find("tokens") == std::string::npos);
  const ops::MoeGemmFp8Config f1 = ops::select_moe_gemm_fp8(
      DType::kBF16, 8, 4096, 7168, 256, false, h200(), ops::moe_decode_rows(false, 8, 0, 256));
  CHECK(f.make_spec({{"out_dtype", "bf16"}, {"tokens", "16"}}).uri ==
        ops::moe_gemm_fp8_spec(f1).uri);
}

TEST_CASE("moe decode: warm-up sets follow the rows a workload gives", "[moe]") {
  // A set with its tokens, or none, among what the definition's call may take.
  const auto decode_tokens = [](const ops::OpDef& d, const ops::Definition& def,
                                const ops::VarAxes& axes) {
    std::vector<std::string> tokens;
    for (const ops::SetArgs& set : d.precompile_sets(def, axes)) {
      if (set.count("tokens") != 0) tokens.push_back(set.at("tokens"));
    }
    return tokens;
  };
  using V = std::vector<std::string>;
  for (const char* op : {"moe_grouped_gemm", "moe_grouped_gemm_fp8"}) {
    INFO(op);
    const ops::OpDef& d = ops::op_or_throw(op);
    for (const ops::Definition& def : d.definitions()) {
      INFO(def.name);
      const bool masked = def.entry.find("masked") != std::string::npos;
      const char* axis = masked ? "max_rows" : "rows";
      CHECK(decode_tokens(d, def, {}) == V{"16", "32", "64"});  // no rows given: every tile
      CHECK(decode_tokens(d, def, {{axis, 1}}) == V{"16"});
      CHECK(decode_tokens(d, def, {{axis, 33}}) == V{"64"});
      CHECK(decode_tokens(d, def, {{axis, 4096}}).empty());
      // Every set is one the catalog compiles (what kjit_precompile_file warms).
      for (const ops::SetArgs& set : d.precompile_sets(def, {{axis, 20}})) {
        CHECK_NOTHROW(d.make_spec(set));
      }
    }
  }
}

TEST_CASE("moe decode: every catalog specialization compiles for sm_90a without spills",
          "[moe][compile]") {
  test::check_decode_catalog("moe_grouped_gemm", "path", "decode", [](int) { return 2; });
  test::check_decode_catalog("moe_grouped_gemm_fp8", "tokens", nullptr,
                             [](int t) { return moe::moe_fp8_decode_blocks_per_sm(t); });
}
