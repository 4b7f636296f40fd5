// The definitions every op exports (each family's src/ops/<family>/<family>_desc.cpp) are
// consistent: unique names built from the op and its const axes, shapes in declared axes only, a
// registered op, a real C entry point, and a reference that exists in tools/devkit/reference/.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "ops/activation/activation_desc.hpp"
#include "ops/attention/attention_desc.hpp"
#include "ops/kv_cache/kv_cache_desc.hpp"
#include "ops/norm/norm_desc.hpp"
#include "ops/rope/rope_desc.hpp"
#include "ops/sampling/sampling_desc.hpp"
#include "ops/registry.hpp"
#include "util/fs.hpp"

namespace fs = std::filesystem;
using kjit::ops::Definition;

namespace {

std::vector<Definition> exported() {
  std::vector<Definition> out;
  for (const auto& op : kjit::ops::op_registry()) {
    if (!op.definitions) continue;  // an op without any fails below
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
        CHECK(std::set<std::string>{"bfloat16", "float16", "float32", "int32", "int64",
                                    "float8_e4m3fn", "bool"}
                  .count(t.dtype));
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

    // "tools/devkit/reference/x.hpp: ref::a, ref::b (note)": the file exists and defines each
    // function.
    const size_t colon = d.reference.find(": ");
    REQUIRE(colon != std::string::npos);
    const std::string file = d.reference.substr(0, colon);
    CHECK(file.rfind("tools/devkit/reference/", 0) == 0);
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
  // Every registry op has some.
  for (const auto& op : kjit::ops::op_registry()) {
    INFO(op.name);
    CHECK(ops_with_defs.count(op.name));
  }
  for (const char* t : {"rmsnorm",
                        "gemma_rmsnorm",
                        "fused_add_rmsnorm",
                        "gemma_fused_add_rmsnorm",
                        "layernorm",
                        "silu_and_mul",
                        "gelu_tanh_and_mul",
                        "rope",
                        "llama31_rope",
                        "rope_cos_sin_cache",
                        "append_paged_kv",
                        "batch_decode",
                        "merge_states",
                        "merge_states_n",
                        "sampling_from_probs",
                        "top_k_sampling_from_probs",
                        "top_p_sampling_from_probs",
                        "min_p_sampling_from_probs",
                        "top_k_top_p_sampling_from_probs",
                        "top_k_top_p_sampling_from_logits",
                        "top_k_renorm_probs",
                        "top_p_renorm_probs",
                        "top_k_mask_logits",
                        "softmax",
                        "argmax"}) {
    INFO(t);
    CHECK(op_types.count(t));
  }
  CHECK(names.count("rmsnorm_h4096"));  // the flashinfer-bench name of Llama-3-8B's norm
  // Llama-3-8B's decode attention and sampler, Qwen 2.5's vocabulary.
  CHECK(names.count("batch_decode_q32_k8_d128_ps16"));
  CHECK(names.count("batch_decode_q28_k4_d128_ps1"));
  CHECK(names.count("top_k_top_p_sampling_from_logits_v128256_fp32"));
  CHECK(names.count("top_p_sampling_from_probs_v151936"));
}

TEST_CASE("defs: the attention and sampling definitions say what the entry points take", "[defs]") {
  using kjit::ops::DType;
  using kjit::ops::SamplingKind;
  auto shape = [](const Definition& d, const std::string& tensor, bool output = false) {
    for (const auto& t : output ? d.outputs : d.inputs) {
      if (t.name == tensor) return t.shape;
    }
    FAIL("no tensor " << tensor << " in " << d.name);
    return std::vector<std::string>{};
  };
  using V = std::vector<std::string>;

  // The page layout is in the cache shapes; the fp8 cache keeps q and out 16-bit.
  const Definition hnd =
      kjit::ops::batch_decode_definition({DType::kF16, true, 64, 8, 128, 1, false});
  CHECK(hnd.name == "batch_decode_q64_k8_d128_ps1_hnd_kve4m3_fp16");
  CHECK(shape(hnd, "k_cache") == V{"num_pages", "num_kv_heads", "page_size", "head_dim"});
  CHECK(shape(hnd, "q") == V{"batch_size", "num_qo_heads", "head_dim"});
  for (const auto& t : hnd.inputs) {
    INFO(t.name);
    if (t.name == "q") CHECK(t.dtype == "float16");
    if (t.name == "k_cache" || t.name == "v_cache") CHECK(t.dtype == "float8_e4m3fn");
  }
  CHECK(hnd.axis("page_size")->value == 1);
  CHECK(hnd.axis("num_qo_heads")->value == 64);
  CHECK_FALSE(hnd.axis("batch_size")->is_const);
  const Definition nhd = kjit::ops::batch_decode_definition({DType::kBF16, false, 32, 8, 128, 16});
  CHECK(nhd.name == "batch_decode_q32_k8_d128_ps16");
  CHECK(shape(nhd, "v_cache") == V{"num_pages", "page_size", "num_kv_heads", "head_dim"});
  CHECK(shape(nhd, "lse", true) == V{"batch_size", "num_qo_heads"});

  const Definition m2 = kjit::ops::merge_states_definition(DType::kF32, 32, 128, false);
  CHECK(m2.name == "merge_states_h32_d128_fp32");
  CHECK(m2.entry == "kjit_merge_states");
  CHECK(m2.inputs.size() == 4);
  const Definition mn = kjit::ops::merge_states_definition(DType::kBF16, 64, 256, true);
  CHECK(mn.name == "merge_states_n_h64_d256");
  CHECK(mn.entry == "kjit_merge_states_n");
  CHECK(shape(mn, "v") == V{"num_states", "seq_len", "num_heads", "head_dim"});
  CHECK_FALSE(mn.axis("num_states")->is_const);

  // Probabilities are fp32 whatever dtype is passed, so it is not in the name; logits are named
  // by dtype unless bf16.
  CHECK(kjit::ops::sampling_definition(SamplingKind::kTopPFromProbs, DType::kBF16, 128256).name ==
        "top_p_sampling_from_probs_v128256");
  CHECK(kjit::ops::sampling_definition(SamplingKind::kArgmax, DType::kBF16, 32000).name ==
        "argmax_v32000");
  CHECK(kjit::ops::sampling_definition(SamplingKind::kSoftmax, DType::kF16, 151936).name ==
        "softmax_v151936_fp16");
  const Definition mask =
      kjit::ops::sampling_definition(SamplingKind::kTopKMaskLogits, DType::kF16, 1000);
  CHECK(mask.outputs.at(0).dtype == "float16");  // masked logits keep their dtype
  CHECK(kjit::ops::sampling_definition(SamplingKind::kTopKRenormProbs, DType::kF16, 1000)
            .outputs.at(0)
            .dtype == "float32");
  // Each kind is its own entry point, and the samplers take the filters the entry point has.
  std::set<std::string> entries;
  for (int k = 0; k <= static_cast<int>(SamplingKind::kArgmax); ++k) {
    const Definition d =
        kjit::ops::sampling_definition(static_cast<SamplingKind>(k), DType::kF32, 50000);
    INFO(d.name);
    CHECK(d.entry == "kjit_" + d.op_type);
    CHECK(entries.insert(d.entry).second);
    CHECK(shape(d, d.op_type == "argmax" ? "input"
                   : kjit::ops::sampling_reads_logits(static_cast<SamplingKind>(k))
                       ? "logits"
                       : "probs") == V{"batch_size", "vocab_size"});
  }
  CHECK(entries.size() == 11);
  using kjit::ops::sample_kind;
  CHECK(sample_kind(false, 0) == SamplingKind::kFromProbs);
  CHECK(sample_kind(false, 1) == SamplingKind::kTopKFromProbs);
  CHECK(sample_kind(false, 2) == SamplingKind::kTopPFromProbs);
  CHECK(sample_kind(false, 4) == SamplingKind::kMinPFromProbs);
  CHECK(sample_kind(false, 3) == SamplingKind::kTopKTopPFromProbs);
  CHECK(sample_kind(true, 3) == SamplingKind::kTopKTopPFromLogits);
  const Definition tk =
      kjit::ops::sampling_definition(SamplingKind::kTopKTopPFromProbs, DType::kF32, 32000);
  std::set<std::string> names;
  for (const auto& t : tk.inputs) names.insert(t.name);
  CHECK(names == std::set<std::string>{"probs", "top_k", "top_p", "seed", "offset"});
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
