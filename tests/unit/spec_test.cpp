#include <catch2/catch.hpp>

#include <set>

#include "jit/spec.hpp"
#include "ops/norm/norm.hpp"
#include "ops/registry.hpp"
#include "util/error.hpp"

using namespace kjit;

TEST_CASE("spec: URIs are readable and deterministic", "[spec]") {
  ops::RmsNormConfig c = ops::select_rmsnorm(ops::DType::kBF16, 4096, 16);
  CHECK(ops::rmsnorm_uri(c) ==
        "rmsnorm_dtype_bf16_hidden_4096_vec_8_threads_per_row_128_rows_per_block_1");
  CHECK(ops::rmsnorm_spec(c).uri == ops::rmsnorm_uri(c));
  CHECK(jit::main_source(ops::rmsnorm_spec(c)) == jit::main_source(ops::rmsnorm_spec(c)));
  CHECK(jit::main_source(ops::rmsnorm_spec(c)).find("constexpr int hidden = 4096;") !=
        std::string::npos);
  CHECK(jit::make_uri("op", {{"a", "1"}, {"b", "x.y"}}) == "op_a_1_b_x.y");
}

TEST_CASE("spec: every catalog specialization has its own URI", "[spec]") {
  std::set<std::string> uris;
  size_t n = 0;
  for (const auto& def : ops::op_registry()) {
    for (const auto& args : def.catalog()) {
      uris.insert(def.make_spec(args).uri);
      ++n;
    }
  }
  CHECK(n > 10);
  CHECK(uris.size() == n);
}

TEST_CASE("spec: different parameters give different URIs", "[spec]") {
  std::set<std::string> uris;
  for (auto dt : {ops::DType::kF32, ops::DType::kF16, ops::DType::kBF16}) {
    for (int h : {1, 2, 3, 64, 4096, 4097}) {
      for (int align : {16, 8, 4, 2})
        uris.insert(ops::rmsnorm_uri(ops::select_rmsnorm(dt, h, align)));
    }
  }
  // Alignment only matters where it changes the vector width, so some collapse; dtype x hidden
  // never do.
  CHECK(uris.size() >= 3 * 6);
}

TEST_CASE("spec: names and values outside [a-z0-9.] are rejected", "[spec]") {
  // Names are words joined by single underscores; values have none (the URI stays unambiguous).
  CHECK(jit::make_uri("op", {{"a_b", "1"}}) == "op_a_b_1");
  CHECK_THROWS_AS(jit::make_uri("op", {{"a", "1_2"}}), Error);
  CHECK_THROWS_AS(jit::make_uri("op", {{"_a", "1"}}), Error);
  CHECK_THROWS_AS(jit::make_uri("op", {{"a__b", "1"}}), Error);
  CHECK_THROWS_AS(jit::make_uri("op", {{"a_", "1"}}), Error);
  CHECK_THROWS_AS(jit::make_uri("op", {{"a", "1/2"}}), Error);
  CHECK_THROWS_AS(jit::make_uri("op", {{"a", ""}}), Error);
  CHECK_THROWS_AS(jit::make_uri("Op", {}), Error);
}

TEST_CASE("spec: rmsnorm picks the widest vector the alignment and size allow", "[spec]") {
  using ops::DType;
  CHECK(ops::select_rmsnorm(DType::kBF16, 4096, 16).vec == 8);
  CHECK(ops::select_rmsnorm(DType::kBF16, 4096, 4).vec == 2);
  CHECK(ops::select_rmsnorm(DType::kBF16, 4097, 16).vec == 1);
  CHECK(ops::select_rmsnorm(DType::kBF16, 4098, 16).vec == 2);
  CHECK(ops::select_rmsnorm(DType::kF32, 4096, 16).vec == 4);
  CHECK(ops::select_rmsnorm(DType::kF32, 4096, 2).vec == 1);
  CHECK(ops::select_rmsnorm(DType::kF16, 128, 16).threads_per_row == 16);
  CHECK(ops::select_rmsnorm(DType::kF16, 128, 16).rows_per_block == 8);
  CHECK(ops::select_rmsnorm(DType::kF16, 1024, 16).threads_per_row == 32);
  CHECK(ops::select_rmsnorm(DType::kBF16, 2048, 16).threads_per_row == 64);
  CHECK(ops::select_rmsnorm(DType::kBF16, 1, 16).threads_per_row == 1);
  CHECK(ops::select_rmsnorm(DType::kBF16, 1, 16).rows_per_block == 128);
  CHECK(ops::select_rmsnorm(DType::kF16, 4097, 16).threads_per_row == 544);
  CHECK_THROWS_AS(ops::select_rmsnorm(DType::kI32, 4096, 16), Error);
  CHECK_THROWS_AS(ops::select_rmsnorm(DType::kBF16, ops::kRmsNormMaxHidden + 1, 16), Error);
}

TEST_CASE("spec: --set arguments are checked against the op's axes", "[spec]") {
  const ops::OpDef* d = ops::find_op("rmsnorm");
  REQUIRE(d);
  CHECK(d->make_spec({{"dtype", "bf16"}, {"hidden", "4096"}}).uri ==
        "rmsnorm_dtype_bf16_hidden_4096_vec_8_threads_per_row_128_rows_per_block_1");
  CHECK_THROWS_AS(d->make_spec({{"dtype", "bf16"}}), Error);
  CHECK_THROWS_AS(d->make_spec({{"dtype", "int8"}, {"hidden", "4096"}}), Error);
  CHECK_THROWS_AS(d->make_spec({{"dtype", "bf16"}, {"hidden", "-1"}}), Error);
  CHECK_THROWS_AS(d->make_spec({{"dtype", "bf16"}, {"hidden", "12x"}}), Error);
  CHECK_THROWS_AS(d->make_spec({{"dtype", "bf16"}, {"hidden", "4096"}, {"bogus", "1"}}), Error);
  CHECK(ops::find_op("nope") == nullptr);
}

TEST_CASE("spec: SpecBuilder gives a setting one name in URI, config and entry", "[spec]") {
  jit::SpecBuilder b("demo_op", {"common", "demo"}, "demo/demo.cuh");
  b.type("dtype", "bf16", "__nv_bfloat16").value("stage_tokens", 16).flag("early_params", false);
  b.value("split", 1, /*uri_default=*/1).flag("cluster_merge", true, /*omit_false=*/true);
  b.entry("kjit::demo::kernel").entry("kjit::demo::merge", {"dtype", "split"});
  const jit::Spec s = b.build();
  CHECK(s.uri == "demo_op_dtype_bf16_stage_tokens_16_early_params_0_cluster_merge_1");
  CHECK(s.config ==
        "namespace kjit_spec {\nusing dtype = __nv_bfloat16;\nconstexpr int stage_tokens = 16;\n"
        "constexpr bool early_params = false;\nconstexpr int split = 1;\n"
        "constexpr bool cluster_merge = true;\n}  // namespace kjit_spec\n");
  REQUIRE(s.entry_names.size() == 2);
  CHECK(s.entry_names[0] ==
        "kjit::demo::kernel<kjit_spec::dtype, kjit_spec::stage_tokens, kjit_spec::early_params, "
        "kjit_spec::split, kjit_spec::cluster_merge>");
  CHECK(s.entry_names[1] == "kjit::demo::merge<kjit_spec::dtype, kjit_spec::split>");
  CHECK(s.includes == std::vector<std::string>{"demo/demo.cuh"});
  CHECK(s.arch_families == std::vector<std::string>{"sm_80+"});
  // A name given twice, a name that is not an identifier, an entry argument that is no parameter.
  jit::SpecBuilder bad("demo_op", {"common"}, "x.cuh");
  bad.value("a", 1);
  CHECK_THROWS_AS(bad.value("a", 2), Error);
  CHECK_THROWS_AS(bad.value("2a", 2), Error);
  CHECK_THROWS_AS(bad.value("a__b", 2).build(), Error);
  jit::SpecBuilder bad_entry("demo_op", {"common"}, "x.cuh");
  bad_entry.value("a", 1).entry("k", {"b"});
  CHECK_THROWS_AS(bad_entry.build(), Error);
  // An enumerator: a word in the URI, its value in the config.
  jit::SpecBuilder e("demo_op", {"common"}, "x.cuh");
  const jit::Spec es = e.choice("act", "silu", 0).build();
  CHECK(es.uri == "demo_op_act_silu");
  CHECK(es.config == "namespace kjit_spec {\nconstexpr int act = 0;\n}  // namespace kjit_spec\n");
}
