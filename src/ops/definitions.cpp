// See definitions.hpp and definition.hpp.
#include "ops/definitions.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "ops/registry.hpp"

namespace kjit::ops {

namespace {

using ojson = nlohmann::ordered_json;

std::string dtype_suffix(DType t) {
  return t == DType::kBF16 ? "" : std::string("_") + dtype_name(t);
}

DefAxis var(const char* name, const char* description) {
  return {name, false, 0, description};
}
DefAxis constant(const char* name, int64_t value, const char* description) {
  return {name, true, value, description};
}
DefTensor tensor(const char* name, std::vector<std::string> shape, DType t,
                 const char* description) {
  return {name, std::move(shape), false, def_dtype_name(t), description};
}
DefTensor scalar(const char* name, const char* description) {
  return {name, {}, true, "float32", description};
}

Definition row_norm(const char* op_type, const char* entry, DType dtype, int64_t hidden,
                    const char* description) {
  Definition d;
  d.name = fmt::format("{}_h{}{}", op_type, hidden, dtype_suffix(dtype));
  d.op_type = op_type;
  d.entry = entry;
  d.description = description;
  d.axes = {var("batch_size", "rows: tokens in the batch"),
            constant("hidden_size", hidden, "row length")};
  return d;
}

}  // namespace

const DefAxis* Definition::axis(const std::string& axis_name) const {
  for (const auto& a : axes) {
    if (a.name == axis_name) return &a;
  }
  return nullptr;
}

const char* def_dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
  }
  return "unknown";
}

std::string definition_json(const Definition& d) {
  ojson j;
  j["name"] = d.name;
  j["op_type"] = d.op_type;
  j["kjit_op"] = d.op;
  j["kjit_entry"] = d.entry;
  j["description"] = d.description;
  j["axes"] = ojson::object();
  for (const auto& a : d.axes) {
    ojson ax = {{"type", a.is_const ? "const" : "var"}};
    if (a.is_const) ax["value"] = a.value;
    ax["description"] = a.description;
    j["axes"][a.name] = ax;
  }
  for (const auto& [key, list] :
       {std::pair{"inputs", &d.inputs}, std::pair{"outputs", &d.outputs}}) {
    j[key] = ojson::object();
    for (const auto& t : *list) {
      j[key][t.name] = {{"shape", t.scalar ? ojson(nullptr) : ojson(t.shape)},
                        {"dtype", t.dtype},
                        {"description", t.description}};
    }
  }
  j["reference"] = d.reference;
  return j.dump(2) + "\n";
}

Definition rmsnorm_definition(DType dtype, int64_t hidden, bool gemma) {
  Definition d = row_norm(gemma ? "gemma_rmsnorm" : "rmsnorm",
                          gemma ? "kjit_gemma_rmsnorm" : "kjit_rmsnorm", dtype, hidden,
                          gemma ? "out = x * rsqrt(mean(x^2) + eps) * (weight + 1) per row"
                                : "out = x * rsqrt(mean(x^2) + eps) * weight per row");
  d.op = "rmsnorm";
  d.inputs = {tensor("input", {"batch_size", "hidden_size"}, dtype, "x"),
              tensor("weight", {"hidden_size"}, dtype,
                     gemma ? "applied as weight + 1" : "per-column scale"),
              scalar("eps", "added to the mean square")};
  d.outputs = {tensor("out", {"batch_size", "hidden_size"}, dtype, "may be input (in place)")};
  d.reference = gemma ? "tests/reference/norm_ref.hpp: ref::rmsnorm (weight_offset = 1)"
                      : "tests/reference/norm_ref.hpp: ref::rmsnorm";
  return d;
}

Definition fused_add_rmsnorm_definition(DType dtype, int64_t hidden, bool gemma) {
  Definition d = row_norm(
      gemma ? "gemma_fused_add_rmsnorm" : "fused_add_rmsnorm",
      gemma ? "kjit_gemma_fused_add_rmsnorm" : "kjit_fused_add_rmsnorm", dtype, hidden,
      gemma ? "residual += input (rounded to the dtype); input = rmsnorm(residual) * (weight + 1)"
            : "residual += input (rounded to the dtype); input = rmsnorm(residual) * weight");
  d.op = "fused_add_rmsnorm";
  d.inputs = {tensor("input", {"batch_size", "hidden_size"}, dtype, "x"),
              tensor("residual", {"batch_size", "hidden_size"}, dtype, "the residual stream"),
              tensor("weight", {"hidden_size"}, dtype,
                     gemma ? "applied as weight + 1" : "per-column scale"),
              scalar("eps", "added to the mean square")};
  d.outputs = {
      tensor("input", {"batch_size", "hidden_size"}, dtype, "the normalized rows, in place"),
      tensor("residual", {"batch_size", "hidden_size"}, dtype, "residual + input, in place")};
  d.reference =
      gemma ? "tests/reference/norm_ref.hpp: ref::residual_add, ref::rmsnorm (weight_offset = 1)"
            : "tests/reference/norm_ref.hpp: ref::residual_add, ref::rmsnorm";
  return d;
}

Definition layernorm_definition(DType dtype, DType param_dtype, int64_t hidden) {
  Definition d = row_norm("layernorm", "kjit_layernorm", dtype, hidden,
                          "out = (x - mean) * rsqrt(var + eps) * gamma + beta per row (biased "
                          "variance)");
  if (param_dtype != dtype) d.name += "_w" + std::string(dtype_name(param_dtype));
  d.op = "layernorm";
  d.inputs = {tensor("input", {"batch_size", "hidden_size"}, dtype, "x"),
              tensor("gamma", {"hidden_size"}, param_dtype, "scale"),
              tensor("beta", {"hidden_size"}, param_dtype, "shift"),
              scalar("eps", "added to the variance")};
  d.outputs = {tensor("out", {"batch_size", "hidden_size"}, dtype, "may be input (in place)")};
  d.reference = "tests/reference/norm_ref.hpp: ref::layernorm";
  return d;
}

Definition act_and_mul_definition(Act act, DType dtype, int64_t d_size) {
  const char* op_type = act == Act::kSilu   ? "silu_and_mul"
                        : act == Act::kGelu ? "gelu_and_mul"
                                            : "gelu_tanh_and_mul";
  Definition d;
  d.name = fmt::format("{}_d{}{}", op_type, d_size, dtype_suffix(dtype));
  d.op_type = op_type;
  d.op = "act_and_mul";
  d.entry = act == Act::kSilu   ? "kjit_silu_and_mul"
            : act == Act::kGelu ? "kjit_gelu_and_mul"
                                : "kjit_gelu_tanh_and_mul";
  d.description = fmt::format("out = {}(gate) * up, where input = [gate | up] per row",
                              act == Act::kSilu   ? "silu"
                              : act == Act::kGelu ? "gelu"
                                                  : "gelu_tanh");
  d.axes = {var("num_tokens", "rows"), constant("d", d_size, "output width (intermediate size)"),
            constant("two_d", 2 * d_size, "input width: gate and up side by side")};
  d.inputs = {tensor("input", {"num_tokens", "two_d"}, dtype, "[gate | up]")};
  d.outputs = {tensor("out", {"num_tokens", "d"}, dtype, "act(gate) * up")};
  d.reference = fmt::format("tests/reference/activation_ref.hpp: ref::act_and_mul (ActKind::{})",
                            act == Act::kSilu   ? "kSilu"
                            : act == Act::kGelu ? "kGelu"
                                                : "kGeluTanh");
  return d;
}

Definition rope_definition(const RopeDefAxes& a) {
  Definition d;
  const bool cache = a.kind == RopeKind::kCosSinCache;
  d.op_type = a.kind == RopeKind::kPosIds    ? "rope"
              : a.kind == RopeKind::kLlama31 ? "llama31_rope"
                                             : "rope_cos_sin_cache";
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
  const char* head = cache ? "head_size" : "head_dim";
  d.description = std::string("rotary embedding of q and k per token, ") +
                  (a.interleave ? "GPT-J pairs (2i, 2i+1)" : "NeoX halves (i, i + rotary_dim/2)") +
                  (a.kind == RopeKind::kPosIds    ? "; angles pos / (theta^(2i/rotary_dim) * scale)"
                   : a.kind == RopeKind::kLlama31 ? "; Llama 3.1 frequency scaling"
                                                  : "; cos and sin from the cache row of pos");
  d.axes = {var("num_tokens", "tokens")};
  if (cache) d.axes.push_back(var("max_position", "rows of cos_sin_cache"));
  d.axes.push_back(constant("num_qo_heads", a.qo_heads, "query heads"));
  d.axes.push_back(constant("num_kv_heads", a.kv_heads, "key heads"));
  d.axes.push_back(constant(head, a.head_dim, "elements per head"));
  d.axes.push_back(constant("rotary_dim", a.rotary_dim, "leading dims of each head rotated"));
  d.axes.push_back(
      constant(cache ? "is_neox" : "interleave", cache ? !a.interleave : a.interleave,
               cache ? "1: NeoX halves, 0: GPT-J pairs" : "1: GPT-J pairs, 0: NeoX halves"));
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
    d.reference = "tests/reference/rope_ref.hpp: ref::rope_head";
    return d;
  }
  d.inputs = {tensor("q", {q_shape[0], q_shape[1], q_shape[2]}, a.dtype, "queries"),
              tensor("k", {k_shape[0], k_shape[1], k_shape[2]}, a.dtype, "keys"),
              tensor("pos_ids", {"num_tokens"}, a.pos_dtype, "position of each token"),
              scalar("rope_scale", "divides the frequencies"),
              scalar("rope_theta", "frequency base")};
  if (a.kind == RopeKind::kLlama31) {
    d.inputs.push_back(scalar("low_freq_factor", "Llama 3.1 scaling"));
    d.inputs.push_back(scalar("high_freq_factor", "Llama 3.1 scaling"));
    d.inputs.push_back(scalar("old_context_len", "Llama 3.1 scaling"));
  }
  d.outputs = {tensor("q_out", {q_shape[0], q_shape[1], q_shape[2]}, a.dtype, "may be q"),
               tensor("k_out", {k_shape[0], k_shape[1], k_shape[2]}, a.dtype, "may be k")};
  d.reference = a.kind == RopeKind::kPosIds
                    ? "tests/reference/rope_ref.hpp: ref::rope_inv_freq, ref::rope_head"
                    : "tests/reference/rope_ref.hpp: ref::llama31_inv_freq, ref::rope_head";
  return d;
}

Definition append_paged_kv_definition(DType dtype, int64_t kv_heads, int64_t head_dim,
                                      int64_t page_size, bool nhd) {
  Definition d;
  d.name = fmt::format("append_paged_kv_k{}_d{}_ps{}{}{}", kv_heads, head_dim, page_size,
                       nhd ? "" : "_hnd", dtype_suffix(dtype));
  d.op_type = "append_paged_kv";
  d.op = "append_paged_kv";
  d.entry = "kjit_append_paged_kv_cache";
  d.description = fmt::format(
      "writes each appended token's k and v rows to (kv_indices[kv_indptr[b] + pos / page_size], "
      "pos % page_size) of the paged caches ({} layout)",
      nhd ? "NHD" : "HND");
  d.axes = {var("num_tokens", "appended tokens"),
            var("batch_size", "requests"),
            var("len_indptr", "batch_size + 1"),
            var("num_kv_indices", "entries of the page table"),
            var("num_pages", "pages in the caches"),
            constant("num_kv_heads", kv_heads, "key / value heads"),
            constant("head_dim", head_dim, "elements per head"),
            constant("page_size", page_size, "token slots per page")};
  const std::vector<std::string> cache_shape =
      nhd ? std::vector<std::string>{"num_pages", "page_size", "num_kv_heads", "head_dim"}
          : std::vector<std::string>{"num_pages", "num_kv_heads", "page_size", "head_dim"};
  d.inputs = {
      tensor("append_k", {"num_tokens", "num_kv_heads", "head_dim"}, dtype, "key rows to append"),
      tensor("append_v", {"num_tokens", "num_kv_heads", "head_dim"}, dtype, "value rows to append"),
      tensor("batch_indices", {"num_tokens"}, DType::kI32, "request of each token"),
      tensor("positions", {"num_tokens"}, DType::kI32, "position of each token in its request"),
      tensor("kv_indices", {"num_kv_indices"}, DType::kI32, "page ids, request by request"),
      tensor("kv_indptr", {"len_indptr"}, DType::kI32, "each request's range in kv_indices"),
      tensor("kv_last_page_len", {"batch_size"}, DType::kI32, "tokens in each last page")};
  d.outputs = {tensor("paged_k_cache", cache_shape, dtype, "written at the appended slots only"),
               tensor("paged_v_cache", cache_shape, dtype, "written at the appended slots only")};
  d.reference = "tests/reference/kv_cache_ref.hpp: ref::append_target";
  return d;
}

std::vector<Definition> op_definitions(std::string_view op) {
  // Realistic const axes: the hidden / intermediate sizes, head counts and page sizes of common
  // models (Llama 3.x, Qwen 2.5, Mistral, Gemma 2, DeepSeek-V3, Phi-2, Falcon, StarCoder2), bf16.
  const DType bf = DType::kBF16;
  std::vector<Definition> out;
  if (op == "rmsnorm") {
    for (int h : {2048, 3072, 4096, 5120, 7168, 8192})
      out.push_back(rmsnorm_definition(bf, h, false));
    for (int h : {2304, 3584, 4608}) out.push_back(rmsnorm_definition(bf, h, true));
  } else if (op == "fused_add_rmsnorm") {
    for (int h : {2048, 3072, 4096, 5120, 7168, 8192}) {
      out.push_back(fused_add_rmsnorm_definition(bf, h, false));
    }
    for (int h : {2304, 3584, 4608}) out.push_back(fused_add_rmsnorm_definition(bf, h, true));
  } else if (op == "layernorm") {
    for (int h : {2560, 4096, 6144, 8192}) out.push_back(layernorm_definition(bf, bf, h));
  } else if (op == "act_and_mul") {
    for (int d : {8192, 14336, 18944, 28672}) {
      out.push_back(act_and_mul_definition(Act::kSilu, bf, d));
    }
    for (int d : {9216, 14336, 36864}) {
      out.push_back(act_and_mul_definition(Act::kGeluTanh, bf, d));
    }
  } else if (op == "rope") {
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
      a.kind = RopeKind::kCosSinCache;
      a.cache_dtype = bf;
      out.push_back(rope_definition(a));
    }
  } else if (op == "append_paged_kv") {
    out.push_back(append_paged_kv_definition(bf, 8, 128, 16, true));
    out.push_back(append_paged_kv_definition(bf, 8, 128, 16, false));
    out.push_back(append_paged_kv_definition(bf, 8, 128, 1, true));
    out.push_back(append_paged_kv_definition(bf, 4, 128, 16, true));
  }
  return out;
}

std::vector<OpDef> with_definitions(std::vector<OpDef> defs) {
  for (auto& d : defs) {
    if (!d.definitions) {
      d.definitions = [name = d.name] { return op_definitions(name); };
    }
  }
  return defs;
}

}  // namespace kjit::ops
