// The definitions every op exports (src/ops/definitions.cpp) are consistent: unique names built
// from the op and its const axes, shapes in declared axes only, a registered op, a real C entry
// point, and a reference that exists in tests/reference/.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "ops/definitions.hpp"
#include "ops/registry.hpp"
#include "util/fs.hpp"

namespace fs = std::filesystem;
using kjit::ops::Definition;

namespace {

std::vector<Definition> exported() {
  std::vector<Definition> out;
  for (const auto& op : kjit::ops::op_registry()) {
    REQUIRE(op.definitions);
    for (auto& d : op.definitions()) out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

TEST_CASE("defs: every exported definition is consistent", "[defs]") {
  const auto defs = exported();
  REQUIRE(defs.size() >= 20);
  const auto header = kjit::util::read_file(fs::path(KJIT_SOURCE_DIR) / "include/kjit/kjit.h");
  REQUIRE(header.has_value());
  std::set<std::string> names, op_types, ops_with_defs;
  for (const auto& d : defs) {
    INFO(d.name);
    CHECK(names.insert(d.name).second);
    CHECK(std::regex_match(d.name, std::regex("[a-z0-9_]+")));  // a safe file name
    CHECK(d.name.rfind(d.op_type + "_", 0) == 0);
    op_types.insert(d.op_type);
    ops_with_defs.insert(d.op);
    REQUIRE(kjit::ops::find_op(d.op) != nullptr);
    CHECK(header->find(d.entry + "(") != std::string::npos);
    CHECK_FALSE(d.description.empty());

    // Const axes carry their value in the name (flags 0 / 1 are spelled as words or omitted).
    std::set<std::string> declared;
    for (const auto& a : d.axes) {
      CHECK(declared.insert(a.name).second);
      if (a.is_const) {
        CHECK(a.value >= 0);
        if (a.value > 1 && a.name != "two_d") {
          CHECK(d.name.find(std::to_string(a.value)) != std::string::npos);
        }
      } else {
        CHECK(a.value == 0);
      }
    }
    // Every shape names declared axes.
    std::set<std::string> used;
    for (const auto* list : {&d.inputs, &d.outputs}) {
      CHECK_FALSE(list->empty());
      for (const auto& t : *list) {
        CHECK(t.scalar == t.shape.empty());
        CHECK(std::set<std::string>{"bfloat16", "float16", "float32", "int32", "int64"}.count(
            t.dtype));
        for (const auto& ax : t.shape) {
          CHECK(declared.count(ax));
          used.insert(ax);
        }
      }
    }
    // A var axis is a size known per call, so it must shape something; a const one may be a
    // parameter of the computation (rotary_dim, interleave).
    for (const auto& a : d.axes) {
      INFO(a.name);
      if (!a.is_const) CHECK(used.count(a.name));
    }

    // "tests/reference/x.hpp: ref::a, ref::b (note)": the file exists and defines each function.
    const size_t colon = d.reference.find(": ");
    REQUIRE(colon != std::string::npos);
    const std::string file = d.reference.substr(0, colon);
    CHECK(file.rfind("tests/reference/", 0) == 0);
    const auto text = kjit::util::read_file(fs::path(KJIT_SOURCE_DIR) / file);
    REQUIRE(text.has_value());
    const std::string fns = d.reference.substr(colon + 2);
    std::smatch m;
    int found = 0;
    for (auto it = fns.cbegin(); std::regex_search(it, fns.cend(), m, std::regex("ref::(\\w+)"));
         it = m.suffix().first) {
      ++found;
      INFO(m[1].str());
      CHECK(text->find(" " + m[1].str() + "(") != std::string::npos);
    }
    CHECK(found >= 1);

    // The JSON says the same.
    const auto j = nlohmann::json::parse(kjit::ops::definition_json(d));
    CHECK(j.at("name") == d.name);
    CHECK(j.at("axes").size() == d.axes.size());
    CHECK(j.at("inputs").size() + j.at("outputs").size() == d.inputs.size() + d.outputs.size());
  }
  // Every op family that existed when definitions were introduced has some.
  for (const char* op :
       {"rmsnorm", "fused_add_rmsnorm", "layernorm", "act_and_mul", "rope", "append_paged_kv"}) {
    INFO(op);
    CHECK(ops_with_defs.count(op));
  }
  for (const char* t : {"rmsnorm", "gemma_rmsnorm", "fused_add_rmsnorm", "gemma_fused_add_rmsnorm",
                        "layernorm", "silu_and_mul", "gelu_tanh_and_mul", "rope", "llama31_rope",
                        "rope_cos_sin_cache", "append_paged_kv"}) {
    INFO(t);
    CHECK(op_types.count(t));
  }
  CHECK(names.count("rmsnorm_h4096"));  // the flashinfer-bench name of Llama-3-8B's norm
}

TEST_CASE("defs: names carry the dtype and the other const choices", "[defs]") {
  using kjit::ops::DType;
  CHECK(kjit::ops::rmsnorm_definition(DType::kBF16, 4096, false).name == "rmsnorm_h4096");
  CHECK(kjit::ops::rmsnorm_definition(DType::kF16, 4096, false).name == "rmsnorm_h4096_fp16");
  CHECK(kjit::ops::rmsnorm_definition(DType::kF32, 4096, true).name == "gemma_rmsnorm_h4096_fp32");
  CHECK(kjit::ops::layernorm_definition(DType::kBF16, DType::kF32, 2048).name ==
        "layernorm_h2048_wfp32");
  CHECK(kjit::ops::act_and_mul_definition(kjit::ops::Act::kGelu, DType::kF16, 11008).name ==
        "gelu_and_mul_d11008_fp16");
  kjit::ops::RopeDefAxes a;
  a.qo_heads = 32;
  a.kv_heads = 8;
  a.head_dim = 128;
  a.rotary_dim = 64;
  a.interleave = true;
  CHECK(kjit::ops::rope_definition(a).name == "rope_q32_k8_d128_r64_gptj");
  a.kind = kjit::ops::RopeKind::kCosSinCache;
  a.cache_dtype = DType::kF32;
  a.pos_dtype = DType::kI64;
  a.dtype = DType::kF16;
  CHECK(kjit::ops::rope_definition(a).name ==
        "rope_cos_sin_cache_q32_k8_d128_r64_gptj_pos64_csfp32_fp16");
  CHECK(kjit::ops::append_paged_kv_definition(DType::kBF16, 8, 128, 16, false).name ==
        "append_paged_kv_k8_d128_ps16_hnd");
}
