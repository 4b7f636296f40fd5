// See attention_desc.hpp.
#include "ops/attention/attention_desc.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "diag/trace_dump.hpp"
#include "ops/attention/decode_attention.hpp"
#include "ops/attention/decode_internal.hpp"
#include "ops/attention/decode_tactics.hpp"
#include "ops/attention/merge_states.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using namespace def;
using ojson = nlohmann::ordered_json;

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
// tactic fields the axes name.
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
    DecodeTactic t;
    t.heads_per_cta = hp;
    pl.num_kv_heads = hp;
    decode_detail::apply_tactic(pl, t, budget);
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

Definition batch_decode_definition(const DecodeDefAxes& a) {
  Definition d;
  d.name = fmt::format("batch_decode_q{}_k{}_d{}_ps{}{}{}{}", a.qo_heads, a.kv_heads, a.head_dim,
                       a.page_size, a.nhd ? "" : "_hnd", a.kv_fp8 ? "_kve4m3" : "",
                       dtype_suffix(a.dtype));
  d.op_type = "batch_decode";
  d.op = "decode_attention";
  d.entry = "kjit_batch_decode_run";
  d.description = fmt::format(
      "one query token per request against its paged KV cache ({} layout), planned by "
      "kjit_batch_decode_plan: query head i reads kv head i / (num_qo_heads / num_kv_heads); "
      "request b's positions are the slots of pages kv_indices[kv_indptr[b] .. kv_indptr[b+1]), "
      "the last page holding kv_last_page_len[b]; x_t = sm_scale * k_scale * (q . k_t) (or "
      "cap * tanh(x_t / cap)), out = v_scale * sum_t softmax(x)_t v_t, lse = log(sum_t exp(x_t))",
      a.nhd ? "NHD" : "HND");
  d.axes = {var("batch_size", "requests (one query token each)"),
            var("len_indptr", "batch_size + 1"),
            var("num_kv_indices", "entries of the page table"),
            var("num_pages", "pages in the caches"),
            constant("num_qo_heads", a.qo_heads, "query heads"),
            constant("num_kv_heads", a.kv_heads, "key / value heads"),
            constant("head_dim", a.head_dim, "elements per head"),
            constant("page_size", a.page_size, "token slots per page")};
  const std::vector<std::string> cache_shape =
      a.nhd ? std::vector<std::string>{"num_pages", "page_size", "num_kv_heads", "head_dim"}
            : std::vector<std::string>{"num_pages", "num_kv_heads", "page_size", "head_dim"};
  const std::string kv_dtype = a.kv_fp8 ? "float8_e4m3fn" : def_dtype_name(a.dtype);
  const char* fp8_note = a.kv_fp8 ? " (fp8: multiplied by k_scale / v_scale)" : "";
  d.inputs = {
      tensor("q", {"batch_size", "num_qo_heads", "head_dim"}, a.dtype, "one query token each"),
      {"k_cache", cache_shape, false, kv_dtype, std::string("paged keys") + fp8_note},
      {"v_cache", cache_shape, false, kv_dtype, std::string("paged values") + fp8_note},
      tensor("kv_indices", {"num_kv_indices"}, DType::kI32, "page ids, request by request"),
      tensor("kv_indptr", {"len_indptr"}, DType::kI32, "each request's range in kv_indices"),
      tensor("kv_last_page_len", {"batch_size"}, DType::kI32, "tokens in each last page"),
      scalar("sm_scale", "logit scale (plan option; 0: 1 / sqrt(head_dim))"),
      scalar("logits_soft_cap", "plan option; 0: off"),
      {"window_left", {}, true, "int32", "plan option; -1: off, else the last window_left + 1"},
      scalar("k_scale", "key scale (1 for a 16-bit cache)"),
      scalar("v_scale", "value scale (1 for a 16-bit cache)")};
  d.outputs = {tensor("out", {"batch_size", "num_qo_heads", "head_dim"}, a.dtype,
                      "attention output (0 for a request with no positions)"),
               tensor("lse", {"batch_size", "num_qo_heads"}, DType::kF32,
                      "optional: log-sum-exp of the logits, natural log (-inf when empty)")};
  d.reference = "tools/devkit/reference/attention_ref.hpp: ref::decode_attention";
  return d;
}

Definition merge_states_definition(DType dtype, int64_t heads, int64_t head_dim, bool n_way) {
  Definition d;
  d.op_type = n_way ? "merge_states_n" : "merge_states";
  d.name = fmt::format("{}_h{}_d{}{}", d.op_type, heads, head_dim, dtype_suffix(dtype));
  d.op = "merge_states";
  d.entry = n_way ? "kjit_merge_states_n" : "kjit_merge_states";
  d.description =
      std::string(
          "merges attention states over disjoint key sets, per (seq, head): s_out = "
          "log(sum_i exp(s_i)), v_out = sum_i exp(s_i - s_out) v_i; s = -inf is an "
          "empty state") +
      (n_way ? " (num_states of them; none gives v_out = 0, s_out = -inf)" : " (two of them)");
  if (n_way) d.axes.push_back(var("num_states", "states merged per (seq, head)"));
  d.axes.push_back(var("seq_len", "sequences (query tokens)"));
  d.axes.push_back(constant("num_heads", heads, "query heads"));
  d.axes.push_back(constant("head_dim", head_dim, "elements per head"));
  const std::vector<std::string> v_shape = {"seq_len", "num_heads", "head_dim"};
  const std::vector<std::string> s_shape = {"seq_len", "num_heads"};
  if (n_way) {
    d.inputs = {
        tensor("v", {"num_states", "seq_len", "num_heads", "head_dim"}, dtype, "the states' v"),
        tensor("s", {"num_states", "seq_len", "num_heads"}, DType::kF32,
               "the states' log-sum-exp (natural log)")};
  } else {
    d.inputs = {tensor("v_a", v_shape, dtype, "first state's v"),
                tensor("s_a", s_shape, DType::kF32, "first state's log-sum-exp (natural log)"),
                tensor("v_b", v_shape, dtype, "second state's v"),
                tensor("s_b", s_shape, DType::kF32, "second state's log-sum-exp")};
  }
  d.outputs = {tensor("v_out", v_shape, dtype, n_way ? "merged v" : "merged v; may be v_a or v_b"),
               tensor("s_out", s_shape, DType::kF32,
                      n_way ? "optional: merged log-sum-exp"
                            : "optional: merged log-sum-exp; may be "
                              "s_a or s_b")};
  d.reference = "tools/devkit/reference/attention_ref.hpp: ref::merge_states";
  return d;
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
  // The plan's choice at each shared-memory class that can run it (the device's; classes that
  // resolve to one pipeline give one spec), with 32-bit row offsets unless the caches (num_pages of
  // them) end past 4 GB, and 64-bit ones besides when num_pages is not known. Page size and layout
  // are launch arguments.
  d.precompile_sets = [](const Definition& def, const VarAxes& axes) {
    const int64_t qo = def.const_axis("num_qo_heads"), kv = def.const_axis("num_kv_heads");
    const int64_t hd = def.const_axis("head_dim");
    if (kv <= 0 || qo % kv != 0) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "definition {}: {} query heads are no multiple of {} kv "
           "heads",
           def.name, qo, kv);
    }
    const bool fp8 = def.tensor_dtype_name("k_cache") == "float8_e4m3fn";
    const std::string q = dtype_name(def.tensor_dtype("q"));
    const int64_t row_bytes = kv * hd * (fp8 ? 1 : dtype_size(def.tensor_dtype("q")));
    std::vector<const char*> addrs = {"32", "64"};
    if (auto pages = var_axis(axes, "num_pages")) {
      const int64_t end = *pages * def.const_axis("page_size") * row_bytes;
      addrs = {end >= int64_t{0xffffffff} ? "64" : "32"};
    }
    std::vector<SetArgs> out;
    for (const char* smem : {"228", "164", "100"}) {
      try {
        select_decode(def.tensor_dtype("q"), fp8, hd, qo / kv, budget_for_class(std::stoi(smem)));
      } catch (const Error& e) {
        if (e.status() != KJIT_ERROR_UNSUPPORTED) throw;
        continue;  // no pipeline fits that class's shared memory: those devices cannot run it
      }
      for (const char* addr : addrs) {
        SetArgs a = {{"q_dtype", q},
                     {"head_dim", std::to_string(hd)},
                     {"group", std::to_string(qo / kv)},
                     {"smem_kb", smem}};
        if (fp8) a["kv_dtype"] = "e4m3";
        if (std::string(addr) == "64") a["addr"] = "64";
        out.push_back(std::move(a));
      }
    }
    return out;
  };
  d.tactic_space = kDecodeTacticSpace;
  d.tactic_specs = decode_tactic_specs;
  d.definitions = [] {
    // Llama 3 8B / Mistral 7B (32 / 8), Llama 3 70B / Qwen 2.5 72B (64 / 8), Qwen 2.5 7B (28 / 4)
    // at the page sizes of paged engines (16) and of token-granular ones (1); the 8B shape also
    // in the HND layout and with an fp8 cache.
    const DType bf = DType::kBF16;
    std::vector<Definition> out;
    struct Heads {
      int q, k;
    };
    for (const Heads h : {Heads{32, 8}, Heads{64, 8}, Heads{28, 4}}) {
      for (int ps : {16, 1}) out.push_back(batch_decode_definition({bf, false, h.q, h.k, 128, ps}));
    }
    out.push_back(batch_decode_definition({bf, false, 32, 8, 128, 16, false}));
    out.push_back(batch_decode_definition({bf, true, 32, 8, 128, 16}));
    return out;
  };
  return d;
}

OpDef merge_states_op_def() {
  OpDef d;
  d.name = "merge_states";
  d.summary = "merge attention states (v, lse) over disjoint key sets: two, or n per row";
  d.axes = {{"dtype", {"bf16", "fp16", "fp32"}, true, "v dtype (lse is fp32)"},
            {"dim", {}, true, "head size (any, 0..65536)"},
            {"align",
             {"16", "8", "4", "2"},
             false,
             "byte alignment of the v pointers and strides (default 16)"}};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    const std::string& dt = args.at("dtype");
    const DType dtype = dtype_from_name(dt);
    const int64_t dim = positive_int_arg(args, "dim", kMergeMaxDim);
    const int align = args.count("align") ? std::stoi(args.at("align")) : 16;
    return merge_states_spec(select_merge_states(dtype, dim, align));
  };
  // 16-byte aligned states; the state count and sequence count are launch arguments.
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    const DType dtype = def.tensor_dtype(def.op_type == "merge_states_n" ? "v" : "v_a");
    return std::vector<SetArgs>{
        {{"dtype", dtype_name(dtype)}, {"dim", std::to_string(def.const_axis("head_dim"))}}};
  };
  d.catalog = [] {
    std::vector<SetArgs> out;
    // Head sizes 64, 128, 256 (fp32 256 shares 128's variant: 32 threads of 4-vectors), and a
    // view only 4 bytes aligned.
    for (const char* dt : {"bf16", "fp16", "fp32"}) {
      for (const char* dim : {"64", "128", "256"}) {
        if (std::string(dt) != "fp32" || std::string(dim) != "256") {
          out.push_back({{"dtype", dt}, {"dim", dim}});
        }
      }
    }
    out.push_back({{"dtype", "bf16"}, {"dim", "128"}, {"align", "4"}});
    return out;
  };
  d.definitions = [] {
    // Per query head: the qo head counts of decode_attention's definitions.
    std::vector<Definition> out;
    for (bool n_way : {false, true}) {
      for (int h : {32, 64, 28}) {
        out.push_back(merge_states_definition(DType::kBF16, h, 128, n_way));
      }
    }
    return out;
  };
  return d;
}

namespace trace {

void batch_decode(const DecodeDefAxes& a, int64_t batch, int64_t num_kv_indices, int64_t num_pages,
                  int64_t kv_len) noexcept {
  const Definition d = batch_decode_definition(a);
  ojson set = {{"dtype", dtype_name(a.dtype)},
               {"batch", std::to_string(batch)},
               {"kv_len", std::to_string(std::max<int64_t>(kv_len, 1))},
               {"qo_heads", std::to_string(a.qo_heads)},
               {"kv_heads", std::to_string(a.kv_heads)},
               {"head_dim", std::to_string(a.head_dim)},
               {"page_size", std::to_string(a.page_size)},
               {"layout", a.nhd ? "nhd" : "hnd"}};
  if (a.kv_fp8) set["kv_dtype"] = "e4m3";
  record(d.name,
         {{"batch_size", batch},
          {"len_indptr", batch + 1},
          {"num_kv_indices", num_kv_indices},
          {"num_pages", num_pages}},
         "decode_attention", set, [&] { return d; });
}

void merge_states(DType dtype, int64_t heads, int64_t head_dim, int64_t seqs) noexcept {
  // No bench times merge_states yet.
  const Definition d = merge_states_definition(dtype, heads, head_dim, false);
  record(d.name, {{"seq_len", seqs}}, nullptr, nullptr, [&] { return d; });
}

void merge_states_n(DType dtype, int64_t heads, int64_t head_dim, int64_t seqs,
                    int64_t num_states) noexcept {
  const Definition d = merge_states_definition(dtype, heads, head_dim, true);
  record(d.name, {{"num_states", num_states}, {"seq_len", seqs}}, nullptr, nullptr,
         [&] { return d; });
}

}  // namespace trace

}  // namespace kjit::ops
