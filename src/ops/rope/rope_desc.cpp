// See rope_desc.hpp.
#include "ops/rope/rope_desc.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "diag/trace_dump.hpp"
#include "ops/pdl.hpp"
#include "ops/rope/qk_norm_rope.hpp"
#include "ops/rope/rope.hpp"
#include "ops/rope/rope_append.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using namespace def;
using ojson = nlohmann::ordered_json;

}  // namespace

Definition rope_definition(const RopeDefAxes& a) {
  Definition d;
  const bool cache = a.kind == RopeKind::kCosSinCache;
  d.op_type = a.kind == RopeKind::kPosIds    ? "rope"
              : a.kind == RopeKind::kLlama31 ? "llama31_rope"
                                             : "rope_cos_sin_cache";
  if (a.indptr && !cache) d.op_type += "_indptr";
  d.name = fmt::format("{}_q{}_k{}_d{}", d.op_type, a.qo_heads, a.kv_heads, a.head_dim);
  if (a.rotary_dim != a.head_dim) d.name += fmt::format("_r{}", a.rotary_dim);
  if (a.interleave) d.name += "_gptj";
  if (a.pos_dtype == DType::kI64) d.name += "_pos64";
  if (cache && a.cache_dtype != a.dtype) d.name += fmt::format("_cs{}", dtype_name(a.cache_dtype));
  d.name += dtype_suffix(a.dtype);
  d.op = "rope";
  d.entry = a.kind == RopeKind::kPosIds    ? "kjit_apply_rope_pos_ids"
            : a.kind == RopeKind::kLlama31 ? "kjit_apply_llama31_rope_pos_ids"
                                           : "kjit_apply_rope_with_cos_sin_cache";
  if (a.indptr && !cache) {
    d.entry = a.kind == RopeKind::kPosIds ? "kjit_apply_rope" : "kjit_apply_llama31_rope";
  }
  const char* head = cache ? "head_size" : "head_dim";
  d.description =
      std::string("rotary embedding of q and k per token") +
      (a.indptr ? " at position offsets[b] + t - indptr[b] (token t of request b), " : ", ") +
      (a.interleave ? "GPT-J pairs (2i, 2i+1)" : "NeoX halves (i, i + rotary_dim/2)") +
      (a.kind == RopeKind::kPosIds    ? "; angles pos / (theta^(2i/rotary_dim) * scale)"
       : a.kind == RopeKind::kLlama31 ? "; Llama 3.1 frequency scaling"
                                      : "; cos and sin from the cache row of pos");
  d.axes = {var("num_tokens", "tokens")};
  if (cache) d.axes.push_back(var("max_position", "rows of cos_sin_cache"));
  if (a.indptr && !cache) {
    d.axes.push_back(var("batch_size", "requests"));
    d.axes.push_back(var("len_indptr", "batch_size + 1"));
  }
  d.axes.push_back(constant("num_qo_heads", a.qo_heads, "query heads"));
  d.axes.push_back(constant("num_kv_heads", a.kv_heads, "key heads"));
  d.axes.push_back(constant(head, a.head_dim, "elements per head"));
  d.axes.push_back(constant("rotary_dim", a.rotary_dim, "leading dims of each head rotated"));
  d.axes.push_back(constant("layout", a.interleave ? 1 : 0,
                            "kjit_rope_layout: 0 NeoX halves (KJIT_ROPE_NEOX), 1 GPT-J pairs "
                            "(KJIT_ROPE_INTERLEAVED)"));
  const std::string q_shape[] = {"num_tokens", "num_qo_heads", head};
  const std::string k_shape[] = {"num_tokens", "num_kv_heads", head};
  if (cache) {
    d.inputs = {tensor("positions", {"num_tokens"}, a.pos_dtype, "row of cos_sin_cache per token"),
                tensor("q", {q_shape[0], q_shape[1], q_shape[2]}, a.dtype, "rotated in place"),
                tensor("k", {k_shape[0], k_shape[1], k_shape[2]}, a.dtype, "rotated in place"),
                tensor("cos_sin_cache", {"max_position", "rotary_dim"}, a.cache_dtype,
                       "cos in the first rotary_dim/2 columns, sin in the rest")};
    d.outputs = {tensor("q", {q_shape[0], q_shape[1], q_shape[2]}, a.dtype, "in place"),
                 tensor("k", {k_shape[0], k_shape[1], k_shape[2]}, a.dtype, "in place")};
    d.reference = "tools/devkit/reference/rope_ref.hpp: ref::rope_head";
    return d;
  }
  d.inputs = {tensor("q", {q_shape[0], q_shape[1], q_shape[2]}, a.dtype, "queries"),
              tensor("k", {k_shape[0], k_shape[1], k_shape[2]}, a.dtype, "keys")};
  if (a.indptr) {
    d.inputs.push_back(tensor("indptr", {"len_indptr"}, a.pos_dtype,
                              "tokens [indptr[b], indptr[b+1]) belong to request b"));
    d.inputs.push_back(
        tensor("offsets", {"batch_size"}, a.pos_dtype, "position of request b's first token"));
  } else {
    d.inputs.push_back(tensor("pos_ids", {"num_tokens"}, a.pos_dtype, "position of each token"));
  }
  d.inputs.push_back(scalar("rope_scale", "divides the frequencies"));
  d.inputs.push_back(scalar("rope_theta", "frequency base"));
  if (a.kind == RopeKind::kLlama31) {
    d.inputs.push_back(scalar("low_freq_factor", "Llama 3.1 scaling"));
    d.inputs.push_back(scalar("high_freq_factor", "Llama 3.1 scaling"));
    d.inputs.push_back(scalar("old_context_len", "Llama 3.1 scaling"));
  }
  d.outputs = {tensor("q_out", {q_shape[0], q_shape[1], q_shape[2]}, a.dtype, "may be q"),
               tensor("k_out", {k_shape[0], k_shape[1], k_shape[2]}, a.dtype, "may be k")};
  d.reference = a.kind == RopeKind::kPosIds
                    ? "tools/devkit/reference/rope_ref.hpp: ref::rope_inv_freq, ref::rope_head"
                    : "tools/devkit/reference/rope_ref.hpp: ref::llama31_inv_freq, ref::rope_head";
  return d;
}

namespace {

// What plan_rope picks for the call's token count (any: a decode size and a prefill size),
// with 16-byte aligned tensors; the early position read where KJIT_PDL_EARLY_INDICES asks for
// it (sm_90 devices) and the plain one (older devices). The cos/sin cache's and the positions'
// dtypes are launch arguments.
std::vector<SetArgs> rope_precompile_sets(const Definition& def, const VarAxes& axes) {
  const bool cache = def.op_type == "rope_cos_sin_cache";
  const bool indptr = def.op_type == "rope_indptr" || def.op_type == "llama31_rope_indptr";
  if (!cache && !indptr && def.op_type != "rope" && def.op_type != "llama31_rope") {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "definition {}: op type {} is no rope", def.name,
         def.op_type);
  }
  const DType dtype = def.tensor_dtype("q");
  const int64_t hd = def.const_axis(cache ? "head_size" : "head_dim");
  const int64_t rd = def.const_axis("rotary_dim");
  const bool il = def.const_axis("layout") != 0;
  const RopeMode mode = cache ? RopeMode::kCache : indptr ? RopeMode::kIndptr : RopeMode::kFreq;
  const RopeConfig base = select_rope(mode, dtype, hd, rd, il, 16);
  std::vector<int64_t> tokens = {1, kRopeUnitMajorMaxTokens + 1};
  if (auto t = var_axis(axes, "num_tokens")) tokens = {*t};
  std::vector<SetArgs> out;
  for (int64_t t : tokens) {
    for (bool early : {false, pdl_early_indices_requested()}) {
      const RopeConfig c = plan_rope(base, t, early, RopeTuning{});
      SetArgs a = {{"mode", cache    ? "cache"
                            : indptr ? "indptr"
                                     : "freq"},
                   {"dtype", dtype_name(dtype)},
                   {"head_dim", std::to_string(hd)},
                   {"rotary_dim", std::to_string(rd)},
                   {"interleave", il ? "1" : "0"},
                   {"layout", c.decode       ? "decode"
                              : c.unit_major ? "unit"
                                             : "slot"}};
      if (c.early_pos) a["early"] = "1";
      out.push_back(std::move(a));
    }
  }
  return out;
}

}  // namespace

OpDef rope_op_def() {
  OpDef d;
  d.name = "rope";
  d.summary = "rotary position embedding of q and k (pos_ids / llama31 / cos_sin_cache)";
  d.axes = {
      {"mode",
       {"freq", "cache", "indptr"},
       true,
       "freq: angles from positions (pos_ids and llama31); cache: cos/sin cache; indptr: angles "
       "from the positions a request's indptr and offsets give"},
      {"dtype", {"bf16", "fp16"}, true, "q/k dtype"},
      {"head_dim", {}, true, "head size (1..1024)"},
      {"rotary_dim", {}, false, "rotated dims, even, <= head_dim and 512 (default head_dim)"},
      {"interleave", {"0", "1"}, false, "1: GPT-J pairs (2i, 2i+1); 0: NeoX halves (default)"},
      {"align",
       {"16", "8", "4", "2"},
       false,
       "byte alignment of pointers and strides (default 16)"},
      {"layout",
       {"slot", "unit", "decode"},
       false,
       "thread layout: slot-major (default; many tokens), unit-major, or the decode kernel "
       "(warp-shared angles; decode sizes where the shape allows)"},
      {"early",
       {"0", "1"},
       false,
       "with layout=decode: 1 reads the position before the PDL wait (KJIT_PDL_EARLY_INDICES)"}};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    const std::string& m = args.at("mode");
    const RopeMode mode = m == "freq"    ? RopeMode::kFreq
                          : m == "cache" ? RopeMode::kCache
                                         : RopeMode::kIndptr;
    const DType dtype = dtype_from_name(args.at("dtype"));
    const int64_t hd = positive_int_arg(args, "head_dim", kRopeMaxHeadDim);
    const int64_t rd = args.count("rotary_dim") ? positive_int_arg(args, "rotary_dim", hd) : hd;
    const bool il = args.count("interleave") && args.at("interleave") == "1";
    const int align = args.count("align") ? std::stoi(args.at("align")) : 16;
    RopeConfig c = select_rope(mode, dtype, hd, rd, il, align);
    c.unit_major = args.count("layout") && args.at("layout") == "unit";
    c.decode = args.count("layout") && args.at("layout") == "decode";
    if (c.decode && !rope_decode_supported(c)) {
      fail(KJIT_ERROR_UNSUPPORTED, "rope layout=decode does not serve this shape");
    }
    c.early_pos = args.count("early") && args.at("early") == "1";
    if (c.early_pos && !c.decode) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "rope early=1 needs layout=decode");
    }
    return rope_spec(c);
  };
  d.catalog = [] {
    std::vector<SetArgs> out;
    auto add = [&](const char* mode, const char* dt, int hd, int rd, int il,
                   const char* align = nullptr) {
      SetArgs a{{"mode", mode},
                {"dtype", dt},
                {"head_dim", std::to_string(hd)},
                {"rotary_dim", std::to_string(rd)},
                {"interleave", std::to_string(il)}};
      if (align) a["align"] = align;
      out.push_back(std::move(a));
    };
    // Llama / Mistral / Qwen (128), Falcon / DeepSeek rope part (64), Gemma (256), Phi-3 (96),
    // Phi-2 (80 with 32 rotated), GLM (128 with 64 rotated, GPT-J pairs), GPT-J (256 with 64),
    // StableLM (80 with 20: 4-element vectors).
    for (const char* dt : {"bf16", "fp16"}) {
      add("freq", dt, 64, 64, 0);
      add("freq", dt, 128, 128, 0);
      add("freq", dt, 256, 256, 0);
      add("freq", dt, 128, 128, 1);
      add("freq", dt, 128, 64, 1);
      add("freq", dt, 96, 96, 0);
      add("cache", dt, 64, 64, 0);
      add("cache", dt, 128, 128, 0);
      add("cache", dt, 256, 256, 0);
      add("cache", dt, 128, 128, 1);
    }
    add("freq", "bf16", 64, 64, 1);
    add("freq", "bf16", 128, 64, 0);
    add("freq", "bf16", 256, 64, 1);
    add("freq", "bf16", 80, 32, 0);
    add("freq", "bf16", 80, 20, 0);
    add("cache", "bf16", 64, 64, 1);
    add("cache", "bf16", 128, 64, 0);
    add("cache", "bf16", 80, 32, 0);
    // Views that are only 4- or 2-byte aligned: narrower vectors, scalar GPT-J pairs.
    add("freq", "bf16", 128, 128, 0, "4");
    add("freq", "bf16", 128, 128, 1, "2");
    // Decode sizes take the decode kernel where it serves the shape (unit-major elsewhere: not in
    // the catalog), with the position before the PDL wait under KJIT_PDL_EARLY_INDICES.
    for (const char* dt : {"bf16", "fp16"}) {
      for (const char* early : {"0", "1"}) {
        for (int hd : {64, 128}) {
          add("freq", dt, hd, hd, 0);
          out.back()["layout"] = "decode";
          out.back()["early"] = early;
        }
      }
    }
    for (const char* early : {"0", "1"}) {
      add("cache", "bf16", 128, 128, 0);
      out.back()["layout"] = "decode";
      out.back()["early"] = early;
    }
    // Positions from indptr and offsets (kjit_apply_rope, NeoX 128) at prefill and decode sizes.
    for (const char* dt : {"bf16", "fp16"}) {
      add("indptr", dt, 128, 128, 0);
      add("indptr", dt, 128, 128, 0);
      out.back()["layout"] = "decode";
    }
    add("indptr", "bf16", 128, 128, 0);
    out.back()["layout"] = "decode";
    out.back()["early"] = "1";
    return out;
  };
  d.precompile_sets = rope_precompile_sets;
  d.definitions = [] {
    const DType bf = DType::kBF16;
    std::vector<Definition> out;
    struct Heads {
      int q, k, d;
    };
    for (const Heads h : {Heads{32, 8, 128}, Heads{64, 8, 128}, Heads{28, 4, 128}}) {
      RopeDefAxes a;
      a.dtype = bf;
      a.qo_heads = h.q;
      a.kv_heads = h.k;
      a.head_dim = a.rotary_dim = h.d;
      out.push_back(rope_definition(a));
      if (h.q == 28) continue;  // Qwen 2.5: plain RoPE only
      a.kind = RopeKind::kLlama31;
      out.push_back(rope_definition(a));
      a.indptr = true;  // FlashInfer's apply_rope / apply_llama31_rope
      out.push_back(rope_definition(a));
      a.kind = RopeKind::kPosIds;
      out.push_back(rope_definition(a));
      a.indptr = false;
      a.kind = RopeKind::kCosSinCache;
      a.cache_dtype = bf;
      out.push_back(rope_definition(a));
    }
    return out;
  };
  return d;
}

namespace {

// The `kjit-cli bench` set of a RoPE call: the sizes `bench rope`, `bench rope_append` and
// `bench qk_norm_rope` share.
ojson rope_bench_set(DType dtype, int64_t tokens, int64_t qo_heads, int64_t kv_heads,
                     int64_t head_dim, int64_t rotary_dim, bool interleave) {
  return {{"dtype", dtype_name(dtype)},           {"tokens", std::to_string(tokens)},
          {"qo_heads", std::to_string(qo_heads)}, {"kv_heads", std::to_string(kv_heads)},
          {"head_dim", std::to_string(head_dim)}, {"rotary_dim", std::to_string(rotary_dim)},
          {"interleave", interleave ? "1" : "0"}};
}

}  // namespace

namespace trace {

void rope(const RopeDefAxes& a, int64_t tokens, int64_t max_position, int64_t batch) noexcept {
  const Definition d = rope_definition(a);
  ojson axes = {{"num_tokens", tokens}};
  if (a.kind == RopeKind::kCosSinCache) axes["max_position"] = max_position;
  ojson set = rope_bench_set(a.dtype, tokens, a.qo_heads, a.kv_heads, a.head_dim, a.rotary_dim,
                             a.interleave);
  if (a.indptr) {
    axes["batch_size"] = batch;
    axes["len_indptr"] = batch + 1;
    set["batch"] = std::to_string(batch);
  }
  // pos_ids and llama31 run the same kernel on the same bytes (only the frequencies differ), so
  // `bench rope` times both; the cos/sin-cache kernel has no bench yet.
  const bool benchable = a.kind != RopeKind::kCosSinCache;
  record(d.name, axes, benchable ? "rope" : nullptr, set, [&] { return d; });
}

}  // namespace trace

namespace {

// The --set axes, values and warm-up sets the fused RoPE ops (rope_append, qk_norm_rope) share:
// the q / k dtype, the head and rotary sizes, the pair layout and the alignment.
std::vector<AxisDef> fused_rope_axes() {
  return {{"dtype", {"bf16", "fp16"}, true, "q/k dtype"},
          {"head_dim", {}, true, "head size (1..1024)"},
          {"rotary_dim", {}, false, "rotated dims, even, <= head_dim and 512 (default head_dim)"},
          {"interleave", {"0", "1"}, false, "1: GPT-J pairs (2i, 2i+1); 0: NeoX halves (default)"},
          {"align",
           {"16", "8", "4", "2"},
           false,
           "byte alignment of pointers and strides (default 16)"}};
}

struct FusedRopeSet {
  DType dtype = DType::kBF16;
  int64_t head_dim = 0, rot_dim = 0;
  bool interleave = false;
  int align = 16;
};

FusedRopeSet fused_rope_set(const SetArgs& args) {
  FusedRopeSet f;
  f.dtype = dtype_from_name(args.at("dtype"));
  f.head_dim = positive_int_arg(args, "head_dim", kRopeMaxHeadDim);
  f.rot_dim =
      args.count("rotary_dim") ? positive_int_arg(args, "rotary_dim", f.head_dim) : f.head_dim;
  f.interleave = args.count("interleave") && args.at("interleave") == "1";
  f.align = args.count("align") ? std::stoi(args.at("align")) : 16;
  return f;
}

// What a call of the definition compiles: its dtype and const axes (16-byte aligned tensors).
SetArgs fused_rope_precompile_set(const Definition& def) {
  return {{"dtype", dtype_name(def.tensor_dtype("q"))},
          {"head_dim", std::to_string(def.const_axis("head_dim"))},
          {"rotary_dim", std::to_string(def.const_axis("rotary_dim"))},
          {"interleave", def.const_axis("layout") != 0 ? "1" : "0"}};
}

}  // namespace

Definition rope_append_definition(const RopeAppendDefAxes& a) {
  Definition d;
  const bool fp8 = a.num_scales > 0;
  d.name = fmt::format("rope_append_paged_kv_q{}_k{}_d{}", a.qo_heads, a.kv_heads, a.head_dim);
  if (a.rotary_dim != a.head_dim) d.name += fmt::format("_r{}", a.rotary_dim);
  if (a.interleave) d.name += "_gptj";
  if (a.pos_dtype == DType::kI64) d.name += "_pos64";
  d.name += fmt::format("_ps{}{}{}{}", a.page_size, a.nhd ? "" : "_hnd", fp8 ? "_e4m3" : "",
                        dtype_suffix(a.dtype));
  d.op_type = "rope_append_paged_kv";
  d.op = "rope_append";
  d.entry = "kjit_rope_append_paged_kv_cache";
  d.description = std::string(
                      "RoPE of q (into q_out) and k, then k and v appended to the paged "
                      "caches at (kv_indices[kv_indptr[b] + pos / page_size], pos % "
                      "page_size), ") +
                  (a.interleave ? "GPT-J pairs" : "NeoX halves") + ", " + (a.nhd ? "NHD" : "HND") +
                  " caches" + (fp8 ? " of float8 e4m3 (x / scale, saturated)" : "");
  d.axes = {var("num_tokens", "appended tokens"),
            var("batch_size", "requests"),
            var("len_indptr", "batch_size + 1"),
            var("num_kv_indices", "entries of the page table"),
            var("num_pages", "pages in the caches"),
            constant("num_qo_heads", a.qo_heads, "query heads"),
            constant("num_kv_heads", a.kv_heads, "key / value heads"),
            constant("head_dim", a.head_dim, "elements per head"),
            constant("rotary_dim", a.rotary_dim, "leading dims of each head rotated"),
            constant("layout", a.interleave ? 1 : 0,
                     "kjit_rope_layout: 0 NeoX halves (KJIT_ROPE_NEOX), 1 GPT-J pairs "
                     "(KJIT_ROPE_INTERLEAVED)"),
            constant("page_size", a.page_size, "token slots per page")};
  const std::vector<std::string> cache_shape =
      a.nhd ? std::vector<std::string>{"num_pages", "page_size", "num_kv_heads", "head_dim"}
            : std::vector<std::string>{"num_pages", "num_kv_heads", "page_size", "head_dim"};
  d.inputs = {
      tensor("q", {"num_tokens", "num_qo_heads", "head_dim"}, a.dtype, "queries"),
      tensor("k", {"num_tokens", "num_kv_heads", "head_dim"}, a.dtype,
             "keys, rotated into the cache"),
      tensor("v", {"num_tokens", "num_kv_heads", "head_dim"}, a.dtype, "values"),
      tensor("pos_ids", {"num_tokens"}, a.pos_dtype, "RoPE position of each token"),
      tensor("batch_indices", {"num_tokens"}, DType::kI32, "request of each token"),
      tensor("positions", {"num_tokens"}, DType::kI32, "position of each token in its request"),
      tensor("kv_indices", {"num_kv_indices"}, DType::kI32, "page ids, request by request"),
      tensor("kv_indptr", {"len_indptr"}, DType::kI32, "each request's range in kv_indices"),
      tensor("kv_last_page_len", {"batch_size"}, DType::kI32, "tokens in each last page"),
      scalar("rope_scale", "divides the frequencies"),
      scalar("rope_theta", "frequency base")};
  if (fp8) {
    d.axes.push_back(var("num_scales", "1 (per tensor) or num_kv_heads (per head)"));
    d.inputs.push_back(tensor("k_scale", {"num_scales"}, DType::kF32, "key dequantization scales"));
    d.inputs.push_back(
        tensor("v_scale", {"num_scales"}, DType::kF32, "value dequantization scales"));
  }
  const DType cache_dtype = fp8 ? DType::kE4M3 : a.dtype;
  d.outputs = {
      tensor("q_out", {"num_tokens", "num_qo_heads", "head_dim"}, a.dtype, "may be q"),
      tensor("paged_k_cache", cache_shape, cache_dtype, "written at the appended slots only"),
      tensor("paged_v_cache", cache_shape, cache_dtype, "written at the appended slots only")};
  d.reference =
      "tools/devkit/reference/rope_ref.hpp: ref::rope_inv_freq, ref::rope_head (the slot: "
      "kv_cache_ref.hpp's append_target)";
  return d;
}

OpDef rope_append_op_def() {
  OpDef d;
  d.name = "rope_append";
  d.summary = "RoPE of q and k fused with the paged KV append of k and v (16-bit or e4m3 caches)";
  d.axes = fused_rope_axes();
  d.axes.push_back({"cache",
                    {"same", "e4m3"},
                    false,
                    "cache dtype: q's dtype (default) or float8 e4m3 with scales"});
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    const FusedRopeSet f = fused_rope_set(args);
    const bool fp8 = args.count("cache") && args.at("cache") == "e4m3";
    return rope_append_spec(
        select_rope_append(f.dtype, f.head_dim, f.rot_dim, f.interleave, f.align, fp8, f.align));
  };
  d.catalog = [] {
    std::vector<SetArgs> out;
    auto add = [&](const char* dt, int hd, int rd, int il, const char* cache) {
      out.push_back({{"dtype", dt},
                     {"head_dim", std::to_string(hd)},
                     {"rotary_dim", std::to_string(rd)},
                     {"interleave", std::to_string(il)},
                     {"cache", cache}});
    };
    // Llama / Mistral / Qwen (128), Falcon (64), Gemma (256), GLM (128 with 64 rotated, GPT-J
    // pairs), into 16-bit and e4m3 caches.
    for (const char* dt : {"bf16", "fp16"}) {
      for (const char* cache : {"same", "e4m3"}) {
        add(dt, 64, 64, 0, cache);
        add(dt, 128, 128, 0, cache);
        add(dt, 256, 256, 0, cache);
        add(dt, 128, 64, 1, cache);
      }
    }
    add("bf16", 128, 128, 1, "same");
    add("bf16", 80, 32, 0, "same");
    return out;
  };
  // The page size, layout, head counts and scale count are launch arguments.
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    SetArgs set = fused_rope_precompile_set(def);
    set["cache"] = def.tensor_dtype("paged_k_cache") == DType::kE4M3 ? "e4m3" : "same";
    return std::vector<SetArgs>{set};
  };
  d.definitions = [] {
    std::vector<Definition> out;
    RopeAppendDefAxes a;  // Llama 3 8B: 32 q heads, 8 kv heads of 128, page 16
    a.qo_heads = 32;
    a.kv_heads = 8;
    a.head_dim = a.rotary_dim = 128;
    out.push_back(rope_append_definition(a));
    a.num_scales = 1;
    out.push_back(rope_append_definition(a));
    a.num_scales = 0;
    a.page_size = 1;
    out.push_back(rope_append_definition(a));
    return out;
  };
  return d;
}

namespace trace {

void rope_append(const RopeAppendDefAxes& a, int64_t tokens, int64_t batch, int64_t num_kv_indices,
                 int64_t num_pages) noexcept {
  const Definition d = rope_append_definition(a);
  ojson axes = {{"num_tokens", tokens},
                {"batch_size", batch},
                {"len_indptr", batch + 1},
                {"num_kv_indices", num_kv_indices},
                {"num_pages", num_pages}};
  if (a.num_scales > 0) axes["num_scales"] = a.num_scales;
  ojson set = rope_bench_set(a.dtype, tokens, a.qo_heads, a.kv_heads, a.head_dim, a.rotary_dim,
                             a.interleave);
  set["page_size"] = std::to_string(a.page_size);
  set["batch"] = std::to_string(batch);
  set["layout"] = a.nhd ? "nhd" : "hnd";
  // `bench rope_append` times e4m3 caches with one scale per tensor (the same bytes moved).
  if (a.num_scales > 0) set["cache"] = "e4m3";
  record(d.name, axes, "rope_append", set, [&] { return d; });
}

}  // namespace trace

Definition qk_norm_rope_definition(const QkNormRopeDefAxes& a) {
  Definition d;
  d.name = fmt::format("qk_norm_rope_q{}_k{}_d{}", a.qo_heads, a.kv_heads, a.head_dim);
  if (a.rotary_dim != a.head_dim) d.name += fmt::format("_r{}", a.rotary_dim);
  if (a.interleave) d.name += "_gptj";
  if (a.pos_dtype == DType::kI64) d.name += "_pos64";
  d.name += dtype_suffix(a.dtype);
  d.op_type = "qk_norm_rope";
  d.op = "qk_norm_rope";
  d.entry = "kjit_qk_rmsnorm_rope";
  d.description = std::string("per-head RMSNorm of q and k (weights q_weight, k_weight), then ") +
                  (a.interleave ? "GPT-J" : "NeoX") + " RoPE, in place (Qwen3)";
  d.axes = {var("num_tokens", "tokens"),
            constant("num_qo_heads", a.qo_heads, "query heads"),
            constant("num_kv_heads", a.kv_heads, "key heads"),
            constant("head_dim", a.head_dim, "elements per head"),
            constant("rotary_dim", a.rotary_dim, "leading dims of each head rotated"),
            constant("layout", a.interleave ? 1 : 0,
                     "kjit_rope_layout: 0 NeoX halves (KJIT_ROPE_NEOX), 1 GPT-J pairs "
                     "(KJIT_ROPE_INTERLEAVED)")};
  d.inputs = {tensor("q_weight", {"head_dim"}, a.dtype, "q RMSNorm weight"),
              tensor("k_weight", {"head_dim"}, a.dtype, "k RMSNorm weight"),
              tensor("pos_ids", {"num_tokens"}, a.pos_dtype, "position of each token"),
              tensor("q", {"num_tokens", "num_qo_heads", "head_dim"}, a.dtype, "queries"),
              tensor("k", {"num_tokens", "num_kv_heads", "head_dim"}, a.dtype, "keys"),
              scalar("eps", "added to the mean square"),
              scalar("rope_scale", "divides the frequencies"),
              scalar("rope_theta", "frequency base")};
  d.outputs = {tensor("q", {"num_tokens", "num_qo_heads", "head_dim"}, a.dtype, "in place"),
               tensor("k", {"num_tokens", "num_kv_heads", "head_dim"}, a.dtype, "in place")};
  d.reference =
      "tools/devkit/reference/rope_ref.hpp: ref::rope_inv_freq, ref::rope_head (after "
      "norm_ref.hpp's rmsnorm per head)";
  return d;
}

OpDef qk_norm_rope_op_def() {
  OpDef d;
  d.name = "qk_norm_rope";
  d.summary = "per-head RMSNorm of q and k fused with RoPE, in place (Qwen3)";
  d.axes = fused_rope_axes();
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    const FusedRopeSet f = fused_rope_set(args);
    return qk_norm_rope_spec(
        select_qk_norm_rope(f.dtype, f.head_dim, f.rot_dim, f.interleave, f.align));
  };
  d.catalog = [] {
    std::vector<SetArgs> out;
    // Qwen3 (128, NeoX, full rotary) in both 16-bit dtypes, plus the shapes the tests cover.
    for (const char* dt : {"bf16", "fp16"}) {
      out.push_back(
          {{"dtype", dt}, {"head_dim", "128"}, {"rotary_dim", "128"}, {"interleave", "0"}});
    }
    out.push_back(
        {{"dtype", "bf16"}, {"head_dim", "64"}, {"rotary_dim", "64"}, {"interleave", "0"}});
    out.push_back(
        {{"dtype", "bf16"}, {"head_dim", "256"}, {"rotary_dim", "256"}, {"interleave", "0"}});
    out.push_back(
        {{"dtype", "bf16"}, {"head_dim", "128"}, {"rotary_dim", "64"}, {"interleave", "1"}});
    return out;
  };
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    return std::vector<SetArgs>{fused_rope_precompile_set(def)};
  };
  d.definitions = [] {
    std::vector<Definition> out;
    QkNormRopeDefAxes a;  // Qwen3 8B: 32 q heads, 8 kv heads of 128; Qwen3 32B: 64 / 8
    a.qo_heads = 32;
    a.kv_heads = 8;
    a.head_dim = a.rotary_dim = 128;
    out.push_back(qk_norm_rope_definition(a));
    a.qo_heads = 64;
    out.push_back(qk_norm_rope_definition(a));
    return out;
  };
  return d;
}

namespace trace {

void qk_norm_rope(const QkNormRopeDefAxes& a, int64_t tokens) noexcept {
  const Definition d = qk_norm_rope_definition(a);
  record(d.name, {{"num_tokens", tokens}}, "qk_norm_rope",
         rope_bench_set(a.dtype, tokens, a.qo_heads, a.kv_heads, a.head_dim, a.rotary_dim,
                        a.interleave),
         [&] { return d; });
}

}  // namespace trace

}  // namespace kjit::ops
