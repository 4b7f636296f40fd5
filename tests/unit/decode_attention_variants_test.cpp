// Decode attention's tuning variants without a GPU: the lookup forms (addr), joint tiles and the
// dependent merge launch as the planner, the specs and the catalog see them.
#include <catch2/catch.hpp>

#include <dlpack/dlpack.h>

#include <string>
#include <vector>

#include "kjit/kjit.h"
#include "ops/attention/decode_attention.hpp"
#include "ops/attention/decode_tactics.hpp"
#include "ops/registry.hpp"
#include "util/error.hpp"

namespace ops = kjit::ops;

namespace {

// B1 x L8192 and B64 x L4096 style tables, planned for 132 SMs (no device needed).
ops::DecodePlanData plan(const ops::DecodeTactic* t, int batch = 1, int pages = 512,
                         int num_splits = 0) {
  std::vector<int32_t> indptr(static_cast<size_t>(batch) + 1);
  for (int b = 0; b <= batch; ++b) indptr[static_cast<size_t>(b)] = b * pages;
  const DLDataType bf16{kDLBfloat, 16, 1};
  return ops::plan_batch_decode(indptr.data(), batch, 32, 8, 128, 16, KJIT_KV_LAYOUT_NHD, bf16,
                                bf16, 0.0f, 0.0f, -1, num_splits, 132, 0, t);
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("decode variants: the default plan takes 32-bit offsets, one tile, PDL merge",
          "[attention]") {
  const ops::DecodePlanData d = plan(nullptr);
  CHECK(d.cfg.addr == 2);
  CHECK(d.cfg.joint_tiles == 1);
  CHECK(d.pdl == 1);              // sm_90+ only (H200 B1 x L8192: 18.05 -> 16.42 us)
  CHECK(d.split.max_splits > 1);  // B1 x L8192 splits: the merge kernel runs
  // The default keeps the plain URI; the others name their form.
  const std::string uri = ops::decode_uri(d.cfg);
  CHECK_FALSE(has(uri, "_addr_"));
  CHECK_FALSE(has(uri, "_jt_"));
  ops::DecodeConfig c = d.cfg;
  c.addr = 1;
  CHECK(has(ops::decode_uri(c), "_addr_1"));
  c.addr = 2;
  c.joint_tiles = 2;
  CHECK(has(ops::decode_uri(c), "_joint_tiles_2"));
  const kjit::jit::Spec s = ops::decode_spec(c);
  CHECK(has(s.config, "constexpr int addr = 2;"));
  CHECK(has(s.config, "constexpr int joint_tiles = 2;"));
  CHECK(has(s.entry_names.at(0),
            "kjit_spec::addr, kjit_spec::joint_tiles, kjit_spec::cluster_merge>"));
  CHECK(has(s.config, "constexpr bool cluster_merge = false;"));
  CHECK(s.entry_names.at(1) ==
        "kjit::attention::decode_merge_kernel<kjit_spec::q_dtype, kjit_spec::head_dim>");
}

TEST_CASE("decode variants: 64-bit lookups take 8 more bytes per token and still fit two CTAs",
          "[attention]") {
  const ops::SmemBudget h200;
  for (bool fp8 : {false, true}) {
    for (int hd : {64, 128, 256}) {
      for (int group : {4, 16}) {
        INFO("fp8 " << fp8 << " head_dim " << hd << " group " << group);
        int per_sm = 0;
        ops::DecodeConfig c = ops::select_decode(ops::DType::kBF16, fp8, hd, group, h200, &per_sm);
        REQUIRE(c.addr == 2);
        const int b32 = ops::decode_smem_bytes(c);
        c.addr = 1;
        const int b64 = ops::decode_smem_bytes(c);
        CHECK(b64 == b32 + (c.stages + 1) * c.stage_tokens * 8);
        // A run may fall back to 64-bit offsets (caches past 4 GB): the plan's residency holds.
        CHECK(per_sm == 2);
        CHECK(2 * (b64 + h200.reserved) <= h200.per_sm);
      }
    }
  }
}

TEST_CASE("decode variants: tuning picks the lookup form, joint tiles and PDL", "[attention]") {
  for (int a : {1, 2}) {
    ops::DecodeTactic t;
    t.addr = a;
    CHECK(plan(&t).cfg.addr == a);
  }
  ops::DecodeTactic t;
  t.pdl = 0;
  CHECK(plan(&t).pdl == 0);
  t = {};
  t.warps = 2;
  t.stage_tokens = 64;
  t.joint_tiles = 2;
  const ops::DecodePlanData j = plan(&t, 64, 256);
  CHECK(j.cfg.joint_tiles == 2);
  CHECK(j.cfg.warps == 2);
  t = {};
  t.warps = 4;
  t.stage_tokens = 128;
  t.stages = 2;
  t.joint_tiles = 2;
  CHECK(plan(&t).cfg.joint_tiles == 2);
  // Three CTAs per SM: two stages of the planned size.
  t = {};
  t.stages = 2;
  CHECK(plan(&t).ctas_per_sm == 3);
}

TEST_CASE("decode variants: invalid lookup forms and tile groups are refused", "[attention]") {
  ops::DecodeTactic t;
  t.addr = 3;
  CHECK_THROWS_AS(plan(&t), kjit::Error);
  t.addr = 0;  // the (page, slot) lookups are gone
  CHECK_THROWS_AS(plan(&t), kjit::Error);
  t = {};
  t.joint_tiles = 3;
  CHECK_THROWS_AS(plan(&t), kjit::Error);
  t = {};
  t.joint_tiles = 2;  // w4 ts64: one tile per warp, nothing to pair
  CHECK_THROWS_AS(plan(&t), kjit::Error);
  t.warps = 2;
  t.stage_tokens = 32;  // one tile per warp again
  CHECK_THROWS_AS(plan(&t), kjit::Error);
}

TEST_CASE("decode variants: the catalog keeps the 64-bit form compiling", "[attention]") {
  const ops::OpDef* d = ops::find_op("decode_attention");
  REQUIRE(d != nullptr);
  int wide = 0, plain = 0;
  for (const ops::SetArgs& a : d->catalog()) {
    const std::string uri = d->make_spec(a).uri;
    wide += has(uri, "_addr_1") ? 1 : 0;
    plain += has(uri, "_addr_") ? 0 : 1;
  }
  CHECK(wide == 1);
  CHECK(plain >= 10);
  for (const char* addr : {"16", "legacy"}) {
    CHECK_THROWS_AS(
        d->make_spec({{"q_dtype", "bf16"}, {"head_dim", "128"}, {"group", "4"}, {"addr", addr}}),
        kjit::Error);
  }
}

TEST_CASE("decode variants: the cluster merge takes 2..16 splits and names its spec",
          "[attention]") {
  ops::DecodeTactic t;
  t.merge = ops::DecodeMerge::kCluster;
  const ops::DecodePlanData d = plan(&t, 1, 512, 16);
  CHECK(d.cfg.cluster_merge == 1);
  CHECK(d.fused_merge == 0);
  CHECK(d.split.max_splits == 16);
  const kjit::jit::Spec s = ops::decode_spec(d.cfg);
  CHECK(has(s.uri, "_cluster_merge_1"));
  CHECK(has(s.config, "constexpr bool cluster_merge = true;"));
  REQUIRE(s.arch_families.size() == 1);
  CHECK(s.arch_families[0] == "sm_90+");  // clusters: never compiled for sm_80
  CHECK(ops::decode_spec(plan(nullptr).cfg).arch_families[0] == "sm_80+");
  // One split: nothing to merge, the plain kernel.
  CHECK(plan(&t, 1, 512, 1).cfg.cluster_merge == 0);
  // More splits than a cluster holds: a clear error, not a silent fallback.
  try {
    plan(&t, 1, 512, 17);
    FAIL("17 splits with the cluster merge were planned");
  } catch (const kjit::Error& e) {
    CHECK(e.status() == KJIT_ERROR_UNSUPPORTED);
    CHECK(has(e.what(), "up to 16 splits"));
  }
  // The auto split of B1 x L8192 (32) is refused the same way: num_splits must say <= 16.
  CHECK_THROWS_AS(plan(&t), kjit::Error);
}

TEST_CASE("decode variants: a cluster merge whose partial does not fit is refused at plan time",
          "[attention]") {
  // fp16 q, fp8 cache, group 16 (two n-tiles), four heads per CTA: 16-token stages leave no room
  // after the warps' merge scratch for the cluster's [64][128] partial. The plain merge fits.
  const std::vector<int32_t> indptr = {0, 40};
  const DLDataType fp16{kDLFloat, 16, 1}, e4m3{10, 8, 1};
  ops::DecodeTactic t;
  t.heads_per_cta = 4;
  auto make = [&] {
    return ops::plan_batch_decode(indptr.data(), 1, 128, 8, 128, 16, KJIT_KV_LAYOUT_NHD, fp16, e4m3,
                                  0.0f, 0.0f, -1, 3, 132, 0, &t);
  };
  CHECK(make().cfg.heads_per_cta == 4);
  t.merge = ops::DecodeMerge::kCluster;
  try {
    make();
    FAIL("a cluster merge without room for its partial was planned");
  } catch (const kjit::Error& e) {
    CHECK(e.status() == KJIT_ERROR_INVALID_ARGUMENT);
    CHECK(has(e.what(), "cluster merge's partial"));
  }
  // The default geometry has the room.
  t.heads_per_cta = 0;
  CHECK(make().cfg.cluster_merge == 1);
}
