// Decode attention's specialization: the spec a DecodeConfig compiles to, and the op's registry
// entry (axes, `compile` arguments, catalog).
#include <string>
#include <vector>

#include "ops/attention/decode_attention.hpp"
#include "ops/attention/decode_internal.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

int int_arg_or(const SetArgs& a, const std::string& name, int fallback) {
  auto it = a.find(name);
  return it == a.end() ? fallback : std::stoi(it->second);
}

SmemBudget budget_for_class(int per_sm_kb) {
  SmemBudget b;
  b.per_sm = per_sm_kb * 1024;
  b.per_block = per_sm_kb * 1024 - 1024;
  b.reserved = 1024;
  return b;
}

// `kjit-cli compile decode_attention --set ...`: the planner's choice for these arguments, with the
// tuning variants the axes name.
jit::Spec decode_spec_from_args(const OpDef& d, const SetArgs& args) {
  check_set_args(d, args);
  const DType q = args.at("q_dtype") == "fp16" ? DType::kF16 : DType::kBF16;
  const std::string kv = args.count("kv_dtype") ? args.at("kv_dtype") : args.at("q_dtype");
  if (kv != "e4m3" && kv != args.at("q_dtype")) {
    fail(KJIT_ERROR_UNSUPPORTED,
         "decode attention needs kv_dtype = q_dtype or e4m3, not {} with {} q", kv,
         args.at("q_dtype"));
  }
  const int64_t group = positive_int_arg(args, "group", 1 << 20);
  const SmemBudget budget = budget_for_class(int_arg_or(args, "smem_kb", 228));
  DecodePlanData pl;
  pl.cfg = select_decode(q, kv == "e4m3", std::stoi(args.at("head_dim")), group, budget);
  const int hp = int_arg_or(args, "heads_per_cta", 1);
  if (hp != 1) {
    DecodeTuning t;
    t.heads_per_cta = hp;
    pl.num_kv_heads = hp;
    decode_detail::apply_tuning(pl, t, budget);
  }
  pl.cfg.cp_bytes = int_arg_or(args, "align", 16);
  if (args.count("addr")) pl.cfg.addr = args.at("addr") == "64" ? 1 : 2;
  if (args.count("merge")) pl.cfg.cluster_merge = args.at("merge") == "cluster" ? 1 : 0;
  return decode_spec(pl.cfg);
}

std::vector<SetArgs> decode_catalog() {
  std::vector<SetArgs> out;
  // Llama / Mistral / Qwen (128), Gemma (256), small models and DeepSeek-style rope heads
  // (64); group 4 stands for 1..8 (one n-tile), 16 for 9..16 (Llama 3.1 405B, Falcon 40B).
  for (const char* hd : {"64", "128", "256"}) {
    for (const char* g : {"4", "16"}) {
      out.push_back({{"q_dtype", "bf16"}, {"head_dim", hd}, {"group", g}});
    }
    out.push_back({{"q_dtype", "fp16"}, {"head_dim", hd}, {"group", "4"}});
    out.push_back({{"q_dtype", "bf16"}, {"kv_dtype", "e4m3"}, {"head_dim", hd}, {"group", "4"}});
  }
  out.push_back({{"q_dtype", "fp16"}, {"head_dim", "128"}, {"group", "16"}});
  out.push_back({{"q_dtype", "fp16"}, {"kv_dtype", "e4m3"}, {"head_dim", "128"}, {"group", "4"}});
  out.push_back({{"q_dtype", "bf16"}, {"kv_dtype", "e4m3"}, {"head_dim", "128"}, {"group", "16"}});
  // The A100 budget picks a shallower pipeline (sm_86 / sm_89 resolve to the same one).
  out.push_back({{"q_dtype", "bf16"}, {"head_dim", "128"}, {"group", "4"}, {"smem_kb", "164"}});
  out.push_back({{"q_dtype", "bf16"}, {"head_dim", "128"}, {"group", "4"}, {"align", "8"}});
  // One multi-head tuning variant, so that code path keeps compiling everywhere. More heads per
  // CTA measured slower than one (H200, B64: 276.8 / 308.6 us with 2 / 4 heads against 275.4 us),
  // so it is only a `bench --set` option, never planned by default.
  out.push_back({{"q_dtype", "bf16"}, {"head_dim", "128"}, {"group", "4"}, {"heads_per_cta", "2"}});
  // Caches past 4 GB take 64-bit offsets.
  out.push_back({{"q_dtype", "bf16"}, {"head_dim", "128"}, {"group", "4"}, {"addr", "64"}});
  // The cluster merge (sm_90 only; see DecodeConfig::cluster_merge).
  for (const char* g : {"4", "16"}) {
    out.push_back({{"q_dtype", "bf16"}, {"head_dim", "128"}, {"group", g}, {"merge", "cluster"}});
  }
  return out;
}

}  // namespace

std::string decode_uri(const DecodeConfig& c) {
  return decode_spec(c).uri;
}

jit::Spec decode_spec(const DecodeConfig& c) {
  const char* q_type = device_type_name(c.q_dtype);
  // Clusters and distributed shared memory are sm_90's.
  jit::SpecBuilder b("decode_attention", {"common", "attention"}, "attention/decode.cuh",
                     {c.cluster_merge != 0 ? "sm_90+" : "sm_80+"});
  b.type("q_dtype", dtype_name(c.q_dtype), q_type);
  // The mma operand type: fp16 for an fp8 cache (its values enter scaled by 2^-8), else q's.
  b.type("mma_dtype", c.kv_fp8 ? "fp16" : dtype_name(c.q_dtype), c.kv_fp8 ? "__half" : q_type);
  b.flag("kv_fp8", c.kv_fp8 != 0);
  b.value("head_dim", c.head_dim).value("n_tiles", c.n_tiles).value("warps", c.warps);
  b.value("stage_tokens", c.stage_tokens).value("stages", c.stages).value("cp_bytes", c.cp_bytes);
  // Left out of the URI at their defaults: one head per CTA, 32-bit offsets, one tile at a time.
  b.value("heads_per_cta", c.heads_per_cta, 1).value("addr", c.addr, 2);
  b.value("joint_tiles", c.joint_tiles, 1).flag("cluster_merge", c.cluster_merge != 0, true);
  b.entry("kjit::attention::decode_kernel");
  b.entry("kjit::attention::decode_merge_kernel", {"q_dtype", "head_dim"});
  return b.build();
}

OpDef decode_attention_op_def() {
  OpDef d;
  d.name = "decode_attention";
  d.summary =
      "paged batch decode attention (GQA on tensor cores, split-KV, NHD / HND, fp8 KV); the "
      "split merge kernel is in the same module";
  d.axes = {{"q_dtype", {"bf16", "fp16"}, true, "q and out dtype"},
            {"kv_dtype", {"bf16", "fp16", "e4m3"}, false, "KV cache dtype (default: q_dtype)"},
            {"head_dim", {"64", "128", "256"}, true, "head size"},
            {"group", {}, true, "query heads per kv head (1..16)"},
            {"smem_kb",
             {"228", "164", "100"},
             false,
             "shared memory per SM of the target: 228 H100/H200 (default), 164 A100, 100 "
             "sm_86/sm_89"},
            {"align", {"16", "8", "4"}, false, "byte alignment of the cache rows (default 16)"},
            {"heads_per_cta",
             {"1", "2", "4"},
             false,
             "kv heads per CTA (default 1; 2 / 4 read longer NHD rows, a tuning variant)"},
            {"addr",
             {"32", "64"},
             false,
             "row addresses the lookups hand the loads: 32- (default) or 64-bit byte offsets "
             "(caches over 4 GB)"},
            {"merge",
             {"kernel", "cluster"},
             false,
             "how split partials combine: a merge kernel (default) or, on sm_90, in a "
             "thread-block cluster through distributed shared memory"}};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) { return decode_spec_from_args(d, args); };
  d.catalog = decode_catalog;
  return d;
}

}  // namespace kjit::ops
