// The persistent grouped GEMM kernels (kernels/moe/moe_gemm_persistent_sm90.cuh) without a GPU:
// the `persistent` specialization axis (in the URI only when 1, so the one-item kernels' URIs
// stay), its entry points and header, what forcing it does to the kernel choice (the tuning the
// bench and the GPU tests pass), when the call's defaults take it (moe_gemm_persistent), and its
// catalog rows compiled by NVRTC for sm_90a with no local memory.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "jit/arch.hpp"
#include "jit/cubin_info.hpp"
#include "jit/settings.hpp"
#include "ops/moe/moe.hpp"
#include "ops/registry.hpp"
#include "runtime/jit_core.hpp"
#include "support/gemm_target.hpp"
#include "support/sass_scan.hpp"
#include "support/temp_dir.hpp"
#include "util/error.hpp"

using namespace kjit;
using ops::DType;
using ops::GemmPath;

namespace {

ops::GemmTarget h200() {
  return test::h200_gemm_target();
}

bool has(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("moe persistent: the axis names its own kernel and leaves the other URIs", "[moe]") {
  // Qwen3-30B-A3B's gate_up at 1024 tokens: the 128-row tile kernel, one item a block, 128 wide
  // (64 rows an expert: ops::moe_wide_tile).
  ops::MoeGemmConfig c =
      ops::select_moe_gemm(DType::kBF16, DType::kBF16, 8192, 64, 1536, 2048, 128, h200());
  REQUIRE(c.path == GemmPath::kSm90);
  CHECK(c.persistent == 0);  // the selection's; the call sets it (moe_gemm_persistent)
  const jit::Spec one = ops::moe_gemm_spec(c);
  CHECK(one.uri == "moe_grouped_gemm_path_sm90_dtype_bf16_out_dtype_bf16_bn_128_stages_6");
  CHECK(has(one.entry_names.at(0), "moe_gemm_sm90_kernel<"));
  c.persistent = 1;
  const jit::Spec p = ops::moe_gemm_spec(c);
  CHECK(p.uri == one.uri + "_persistent_1");
  CHECK(has(p.entry_names.at(0), "moe_gemm_sm90_persistent_kernel<"));
  CHECK(p.includes == std::vector<std::string>{"moe/moe_gemm_persistent_sm90.cuh"});
  CHECK(one.includes == std::vector<std::string>{"moe/moe_gemm_sm90.cuh"});
  // SwiGLU: both flags in the URI.
  c.swiglu = 1;
  CHECK(has(ops::moe_gemm_spec(c).uri, "_swiglu_1_persistent_1"));

  // The registry's --set form: the same specs; persistent only on the sm90 path; 0 is the default.
  const ops::OpDef& d = ops::op_or_throw("moe_grouped_gemm");
  const ops::SetArgs base = {{"path", "sm90"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}};
  ops::SetArgs set = base;
  set["persistent"] = "1";
  CHECK(d.make_spec(set).uri == p.uri);
  set["persistent"] = "0";
  CHECK(d.make_spec(set).uri == one.uri);
  for (const char* path : {"decode", "simt"}) {
    ops::SetArgs bad = {{"path", path}, {"dtype", "bf16"}, {"out_dtype", "bf16"}};
    bad["persistent"] = "1";
    CHECK_THROWS_AS(d.make_spec(bad), Error);
  }
  ops::SetArgs two = base;
  two["persistent"] = "2";
  CHECK_THROWS_AS(d.make_spec(two), Error);

  // fp8: the same axis; not with the decode kernel's token tile.
  const ops::OpDef& f = ops::op_or_throw("moe_grouped_gemm_fp8");
  ops::MoeGemmFp8Config fc =
      ops::select_moe_gemm_fp8(DType::kBF16, 16384, 1536, 2048, 128, true, h200());
  CHECK(fc.tokens == 0);
  CHECK(fc.bn == 128);
  CHECK(fc.persistent == 0);
  const std::string fone = ops::moe_gemm_fp8_spec(fc).uri;
  CHECK_FALSE(has(fone, "persistent"));
  fc.persistent = 1;
  const jit::Spec fp = ops::moe_gemm_fp8_spec(fc);
  CHECK(fp.uri == fone + "_persistent_1");
  CHECK(has(fp.entry_names.at(0), "moe_gemm_fp8_sm90_persistent_kernel<"));
  CHECK(f.make_spec({{"out_dtype", "bf16"}, {"swiglu", "1"}, {"persistent", "1"}}).uri == fp.uri);
  CHECK_THROWS_AS(f.make_spec({{"out_dtype", "bf16"}, {"tokens", "16"}, {"persistent", "1"}}),
                  Error);
}

TEST_CASE("moe persistent: forcing it takes the tile kernel or refuses the call", "[moe]") {
  ops::MoeGemmTuning t;
  t.persistent = true;
  // A decode-sized call (Qwen3 at 1 token: 8 rows) is sent to the tile kernel, as kTiles does.
  CHECK(ops::moe_tuned_decode_rows({}, false, 8, 0, 128) == 8);
  CHECK(ops::moe_tuned_decode_rows(t, false, 8, 0, 128) == 0);
  CHECK(ops::moe_tuned_decode_rows(t, true, 128 * 4, 4, 128) == 0);
  // The pairs too (pair alone names the persistent form: moe_gemm_persistent).
  ops::MoeGemmTuning pair;
  pair.pair = true;
  CHECK(ops::moe_tuned_decode_rows(pair, false, 8, 0, 128) == 0);
  CHECK(ops::moe_tuned_decode_rows(pair, true, 128 * 4, 4, 128) == 0);
  CHECK(ops::select_moe_gemm(DType::kBF16, DType::kBF16, 8, 0, 1536, 2048, 128, h200(),
                             ops::moe_tuned_decode_rows(t, false, 8, 0, 128))
            .path == GemmPath::kSm90);
  // Served by the tile kernel: fine; by the decode kernel or the fallback: refused.
  CHECK_NOTHROW(ops::check_moe_forced("op", t, false, true));
  CHECK_THROWS_AS(ops::check_moe_forced("op", t, true, false), Error);
  CHECK_THROWS_AS(ops::check_moe_forced("op", t, false, false), Error);
  try {
    ops::check_moe_forced("moe_grouped_gemm", t, false, false);
  } catch (const Error& e) {
    CHECK(e.status() == KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(has(e.what(), "persistent"));
  }
  // Without it nothing is forced.
  CHECK_NOTHROW(ops::check_moe_forced("op", {}, false, false));
}

namespace {

using test::local_memory_ops;

}  // namespace

// The catalog's persistent specs (the SwiGLU forms among them) built for sm_90a: no local memory,
// and no TMA coordinate left under a spent elect-loop predicate (the ptxas pattern that made the
// SwiGLU form load the gate rows as up rows).
TEST_CASE("moe persistent: the catalog's persistent specs compile for sm_90a without spills",
          "[moe][compile]") {
  test::TempDir dir;  // a fresh cache: every spec compiles here
  jit::Settings s;
  s.cache_dir = dir.path() / "cache";
  s.gen_dir = s.cache_dir / "generated";
  jit::JitCore core(s);
  int built = 0;
  const auto check_spec = [&](const ops::OpDef& d, const ops::SetArgs& set) {
    const jit::Spec spec = d.make_spec(set);
    INFO(spec.uri);
    const jit::Artifact a = core.build(spec, jit::ArchTarget{9, 0, true});
    REQUIRE(a.meta.lowered_names.size() == 1);
    const std::string& name = a.meta.lowered_names[0].second;
    CHECK(has(name, "persistent"));
    const jit::CubinKernelInfo info = jit::cubin_kernel_info(a.cubin, name);
    INFO(info.registers << " registers");
    CHECK(info.registers > 0);
    const std::string code = jit::cubin_kernel_code(a.cubin, name);
    CHECK(local_memory_ops(code) == 0);
    CHECK(test::tma_coordinate_under_spent_predicate(code) == 0);
    ++built;
  };
  for (const char* op : {"moe_grouped_gemm", "moe_grouped_gemm_fp8"}) {
    const ops::OpDef& d = ops::op_or_throw(op);
    for (const ops::SetArgs& set : d.catalog()) {
      if (set.count("persistent") == 0 || set.at("persistent") != "1") continue;
      check_spec(d, set);
    }
  }
  // The tile path's default (bf16 / fp16 a, out in a's dtype or fp32, both tile widths; SwiGLU
  // out in a's dtype at both widths) and its pairs (out in a's dtype, both widths), the fp8
  // defaults (plain bf16 out, SwiGLU bf16 / fp16), the fp8 256-wide tile (plain bf16 out, SwiGLU
  // bf16 / fp16) and the fp8 default's pairs at both widths; then the bf16 / fp16 op's with a
  // 16-bit out again in the TMA-store epilogue's form (12 of its 16: pairs among them), and every
  // fp8 one (8).
  CHECK(built == 8 + 4 + 4 + 1 + 2 + 3 + 2 + 12 + 8);
}

// The scan finds the sequence ptxas 13.0 emitted for the persistent SwiGLU kernel's producer at
// c02e0c1 (cuobjdump -sass, 0x4cb0-0x4da0: the second box's elect loop branching back, `@P0 R2UR
// UR31, R13` setting the third box's row, the third box's elect loop and UTMALDG), and not the
// same code with that R2UR unguarded, nor an R2UR the next loop's ELECT guards.
TEST_CASE("moe persistent: the SASS scan flags a TMA coordinate under a spent predicate", "[moe]") {
  std::vector<uint64_t> words = {
      0xfffffffd00e00947, 0x001fea000393ffff,  // @P0 BRA.U.ANY (back)
      0x000000000d0572ca, 0x000fe400000e0000,  // R2UR UR5, R13
      0x000000000000781c, 0x000fd60003f6e170,  // PLOP3.LUT P3
      0x0000003f0500728c, 0x000fe2000bf06270,  // UISETP.GE.AND UP0
      0x000000000d1f02ca, 0x000fca00000e0000,  // @P0 R2UR UR31, R13  (never runs)
      0x000000000000781c, 0x000fe40003f4f008,  // PLOP3.LUT P2
      0x000000000000781c, 0x000fd60003f0f008,  // PLOP3.LUT P0
      0x0000600007042836, 0x000fe40000000000,  // @P2 VIADD
      0x00000000003f7886, 0x000fca0000000100,  // VOTEU.ANY
      0x00000000003f082f, 0x000fda0003860000,  // @P0 ELECT P3
      0x00000000061e32ca, 0x000fe400000e0000,  // @P3 R2UR UR30, R6
      0x000000000e1d32ca, 0x000fe400000e0000,  // @P3 R2UR UR29, R14
      0x00000000041c32ca, 0x000fe400000e0000,  // @P3 R2UR UR28, R4
      0x000000000000381c, 0x000fe40001f0e170,  // @P3 PLOP3.LUT P0
      0x000000000000781c, 0x000fd20003f6e170,  // PLOP3.LUT P3
      0x0000001c120005b4, 0x0001e40008008000,  // @UP0 UTMALDG.2D
      0xfffffffd00e00947, 0x001fea000393ffff,  // @P0 BRA.U.ANY (back)
  };
  const auto code_of = [](const std::vector<uint64_t>& w) {
    std::string code(w.size() * 8, '\0');
    std::memcpy(code.data(), w.data(), code.size());
    return code;
  };
  CHECK(test::tma_coordinate_under_spent_predicate(code_of(words)) == 1);
  std::vector<uint64_t> fixed = words;
  fixed[8] = 0x000000000d1f72ca;  // R2UR UR31, R13 (PT): what 1c6e4f4's SASS has
  CHECK(test::tma_coordinate_under_spent_predicate(code_of(fixed)) == 0);
  // The R2UR after the next loop's ELECT (whose guard writes P0 anew): not flagged.
  std::vector<uint64_t> later = words;
  later[8] = 0x000000000000781c;  // PLOP3 in place of the R2UR
  later[9] = 0x000fd60003f6e170;
  later[20] = 0x000000000d1f02ca;  // @P0 R2UR right after the ELECT
  CHECK(test::tma_coordinate_under_spent_predicate(code_of(later)) == 0);
  // A plain conditional branch (bit 20 of its second word clear) is no elect loop.
  std::vector<uint64_t> plain = words;
  plain[1] = 0x001fea000383ffff;
  CHECK(test::tma_coordinate_under_spent_predicate(code_of(plain)) == 0);
}

// The persistent form is the tile path's default (SwiGLU or not), except under a forced one-item
// kernel.
TEST_CASE("moe persistent: the default on the tile path", "[moe]") {
  ops::MoeGemmTuning none, tiles, forced;
  tiles.force = ops::MoeGemmForce::kTiles;
  forced.persistent = true;
  CHECK(ops::moe_gemm_persistent(none, true) == 1);
  CHECK(ops::moe_gemm_persistent(none, false) == 0);  // decode or fallback path
  CHECK(ops::moe_gemm_persistent(tiles, true) == 0);  // path=sm90: one block per item
  CHECK(ops::moe_gemm_persistent(forced, true) == 1);
  // Where pairs pay (moe_pairs_pay) the default takes them; a forced form keeps its own.
  CHECK(ops::moe_gemm_persistent(none, true, true) == 2);
  CHECK(ops::moe_gemm_persistent(none, false, true) == 0);
  CHECK(ops::moe_gemm_persistent(tiles, true, true) == 0);
  CHECK(ops::moe_gemm_persistent(forced, true, true) == 1);
}

// Pairs pay where each expert has one row tile of a long K (DeepSeek-V3's gate_up at 4096 tokens:
// 128 rows an expert, k 7168), not where experts have several row tiles (Qwen3-30B-A3B at 4096
// tokens, Mixtral), K is short (Qwen3 at 2048 tokens), or there is one column tile to pair.
TEST_CASE("moe persistent: pairs where experts have one row tile over a long K", "[moe]") {
  CHECK(ops::moe_pairs_pay(128, 4096, 7168, 256));
  CHECK(ops::moe_pairs_pay(128, 4096, 7168, 128));
  CHECK(ops::moe_pairs_pay(40, 4096, 7168, 128));
  CHECK_FALSE(ops::moe_pairs_pay(129, 4096, 7168, 256));
  CHECK_FALSE(ops::moe_pairs_pay(256, 1536, 2048, 256));
  CHECK_FALSE(ops::moe_pairs_pay(128, 1536, 2048, 256));
  CHECK_FALSE(ops::moe_pairs_pay(1024, 28672, 4096, 256));
  CHECK_FALSE(ops::moe_pairs_pay(128, 256, 7168, 256));
  CHECK(ops::moe_pairs_pay(128, 512, 7168, 256));
  // As a call tunes its selection (moe_gemm_tune: the width first, then the form).
  ops::MoeGemmConfig ds =
      ops::select_moe_gemm(DType::kBF16, DType::kBF16, 32768, 128, 4096, 7168, 256, h200());
  REQUIRE(ds.path == GemmPath::kSm90);
  ops::MoeGemmConfig forced_single = ds;
  ops::moe_gemm_tune(ds, {}, 128, 4096, 7168);
  CHECK(ds.persistent == 2);
  ops::MoeGemmTuning single;
  single.persistent = true;
  ops::moe_gemm_tune(forced_single, single, 128, 4096, 7168);
  CHECK(forced_single.persistent == 1);
  ops::MoeGemmConfig qw =
      ops::select_moe_gemm(DType::kBF16, DType::kBF16, 16384, 128, 1536, 2048, 128, h200());
  ops::moe_gemm_tune(qw, {}, 128, 1536, 2048);
  CHECK(qw.persistent == 1);
  ops::MoeGemmFp8Config f8 =
      ops::select_moe_gemm_fp8(DType::kBF16, 32768, 4096, 7168, 256, false, h200());
  REQUIRE(f8.tokens == 0);
  ops::moe_gemm_fp8_tune(f8, {}, 128, 4096, 7168, false);
  CHECK(f8.persistent == 2);
  ops::MoeGemmTuning wide;
  wide.bn = 256;
  ops::moe_gemm_fp8_tune(f8, wide, 128, 4096, 7168, false);
  CHECK(f8.bn == 256);
  CHECK(f8.persistent == 2);
}

// What kjit_precompile_file warms for a grouped GEMM definition holds the spec a large call runs
// (the persistent tile kernel, plain GEMM), so a call captured in a CUDA graph after the warm-up
// never compiles.
TEST_CASE("moe persistent: the warm-up sets hold the tile kernel in the form calls run", "[moe]") {
  const auto warm_uris = [](const ops::OpDef& d, const ops::Definition& def) {
    std::vector<std::string> uris;
    for (const ops::SetArgs& set : d.precompile_sets(def, {})) uris.push_back(d.make_spec(set).uri);
    return uris;
  };
  const auto holds = [](const std::vector<std::string>& uris, const std::string& uri) {
    return std::find(uris.begin(), uris.end(), uri) != uris.end();
  };
  const ops::OpDef& bf = ops::op_or_throw("moe_grouped_gemm");
  for (const ops::Definition& def : bf.definitions()) {
    INFO(def.name);
    const int64_t experts = def.const_axis("experts");
    ops::MoeGemmConfig c =
        ops::select_moe_gemm(def.tensor_dtype("a"), def.tensor_dtype("out"), 512 * experts, 512,
                             def.const_axis("n"), def.const_axis("k"), experts, h200());
    REQUIRE(c.path == GemmPath::kSm90);
    c.persistent = ops::moe_gemm_persistent({}, true);
    CHECK(c.persistent == 1);
    CHECK(holds(warm_uris(bf, def), ops::moe_gemm_spec(c).uri));
    c.tma_out = 1;  // the form a TMA-ready 16-bit out runs
    CHECK(holds(warm_uris(bf, def), ops::moe_gemm_spec(c).uri));
    // One row tile an expert: the pairs where they pay (Mixtral's and DeepSeek-V3's K).
    const int64_t n = def.const_axis("n"), k = def.const_axis("k");
    ops::MoeGemmConfig one = ops::select_moe_gemm(def.tensor_dtype("a"), def.tensor_dtype("out"),
                                                  128 * experts, 128, n, k, experts, h200());
    REQUIRE(one.path == GemmPath::kSm90);
    one.persistent = ops::moe_gemm_persistent({}, true, ops::moe_pairs_pay(128, n, k, one.bn));
    CHECK(one.persistent == (k == 2048 ? 1 : 2));  // Qwen3-30B-A3B's short K: no pairs
    CHECK(holds(warm_uris(bf, def), ops::moe_gemm_spec(one).uri));
  }
  const ops::OpDef& f8 = ops::op_or_throw("moe_grouped_gemm_fp8");
  for (const ops::Definition& def : f8.definitions()) {
    INFO(def.name);
    ops::MoeGemmFp8Config c =
        ops::select_moe_gemm_fp8(def.tensor_dtype("out"), 4096 * 8, def.const_axis("n"),
                                 def.const_axis("k"), def.const_axis("experts"), false, h200());
    REQUIRE(c.tokens == 0);
    c.persistent = ops::moe_gemm_persistent({}, true);
    CHECK(holds(warm_uris(f8, def), ops::moe_gemm_fp8_spec(c).uri));
    c.tma_out = 1;  // the form a TMA-ready 16-bit out runs
    CHECK(holds(warm_uris(f8, def), ops::moe_gemm_fp8_spec(c).uri));
    ops::MoeGemmFp8Config one = ops::select_moe_gemm_fp8(
        def.tensor_dtype("out"), 128 * def.const_axis("experts"), def.const_axis("n"),
        def.const_axis("k"), def.const_axis("experts"), false, h200());
    REQUIRE(one.tokens == 0);
    one.persistent = ops::moe_gemm_persistent(
        {}, true, ops::moe_pairs_pay(128, def.const_axis("n"), def.const_axis("k"), one.bn));
    CHECK(one.persistent == (def.const_axis("k") == 2048 ? 1 : 2));
    CHECK(holds(warm_uris(f8, def), ops::moe_gemm_fp8_spec(one).uri));
  }
}
