// See definitions.hpp and definition.hpp.
#include "diag/definitions.hpp"

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
  d.reference = gemma ? "tools/devkit/reference/norm_ref.hpp: ref::rmsnorm (weight_offset = 1)"
                      : "tools/devkit/reference/norm_ref.hpp: ref::rmsnorm";
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
  d.reference = gemma ? "tools/devkit/reference/norm_ref.hpp: ref::residual_add, ref::rmsnorm "
                        "(weight_offset = 1)"
                      : "tools/devkit/reference/norm_ref.hpp: ref::residual_add, ref::rmsnorm";
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
  d.reference = "tools/devkit/reference/norm_ref.hpp: ref::layernorm";
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
  d.reference =
      fmt::format("tools/devkit/reference/activation_ref.hpp: ref::act_and_mul (ActKind::{})",
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
    d.reference = "tools/devkit/reference/rope_ref.hpp: ref::rope_head";
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
                    ? "tools/devkit/reference/rope_ref.hpp: ref::rope_inv_freq, ref::rope_head"
                    : "tools/devkit/reference/rope_ref.hpp: ref::llama31_inv_freq, ref::rope_head";
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
  d.reference = "tools/devkit/reference/kv_cache_ref.hpp: ref::append_target";
  return d;
}

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

bool sampling_reads_logits(SamplingKind kind) {
  return kind == SamplingKind::kTopKTopPFromLogits || kind == SamplingKind::kTopKMaskLogits ||
         kind == SamplingKind::kSoftmax || kind == SamplingKind::kArgmax;
}

SamplingKind sample_kind(bool logits, int filters) {
  if (logits) return SamplingKind::kTopKTopPFromLogits;
  switch (filters) {
    case 0: return SamplingKind::kFromProbs;
    case 1: return SamplingKind::kTopKFromProbs;
    case 2: return SamplingKind::kTopPFromProbs;
    case 4: return SamplingKind::kMinPFromProbs;
    default: return SamplingKind::kTopKTopPFromProbs;  // 1 | 2, the only other one kjit.h has
  }
}

Definition sampling_definition(SamplingKind kind, DType dtype, int64_t vocab) {
  using K = SamplingKind;
  const bool logits = sampling_reads_logits(kind);
  const DType in_dtype = logits ? dtype : DType::kF32;
  Definition d;
  switch (kind) {
    case K::kFromProbs: d.op_type = "sampling_from_probs"; break;
    case K::kTopKFromProbs: d.op_type = "top_k_sampling_from_probs"; break;
    case K::kTopPFromProbs: d.op_type = "top_p_sampling_from_probs"; break;
    case K::kMinPFromProbs: d.op_type = "min_p_sampling_from_probs"; break;
    case K::kTopKTopPFromProbs: d.op_type = "top_k_top_p_sampling_from_probs"; break;
    case K::kTopKTopPFromLogits: d.op_type = "top_k_top_p_sampling_from_logits"; break;
    case K::kTopKRenormProbs: d.op_type = "top_k_renorm_probs"; break;
    case K::kTopPRenormProbs: d.op_type = "top_p_renorm_probs"; break;
    case K::kTopKMaskLogits: d.op_type = "top_k_mask_logits"; break;
    case K::kSoftmax: d.op_type = "softmax"; break;
    case K::kArgmax: d.op_type = "argmax"; break;
  }
  // Probabilities are always fp32, so only a logits dtype is a choice worth naming.
  d.name = fmt::format("{}_v{}{}", d.op_type, vocab, logits ? dtype_suffix(dtype) : "");
  d.op = kind == K::kSoftmax ? "softmax" : kind == K::kArgmax ? "argmax" : "sampling_filter";
  d.entry = "kjit_" + d.op_type;
  d.axes = {var("batch_size", "rows"), constant("vocab_size", vocab, "row length")};
  const char* in_name = kind == K::kArgmax ? "input" : logits ? "logits" : "probs";
  d.inputs = {tensor(in_name, {"batch_size", "vocab_size"}, in_dtype,
                     logits ? "logits" : "probabilities; need not be normalized")};
  const bool top_k = kind == K::kTopKFromProbs || kind == K::kTopKTopPFromProbs ||
                     kind == K::kTopKTopPFromLogits || kind == K::kTopKRenormProbs ||
                     kind == K::kTopKMaskLogits;
  const bool top_p = kind == K::kTopPFromProbs || kind == K::kTopKTopPFromProbs ||
                     kind == K::kTopKTopPFromLogits || kind == K::kTopPRenormProbs;
  const bool min_p = kind == K::kMinPFromProbs;
  const bool temperature = kind == K::kTopKTopPFromLogits || kind == K::kSoftmax;
  const bool draws = kind <= K::kTopKTopPFromLogits;
  if (top_k) {
    d.inputs.push_back(tensor("top_k", {"batch_size"}, DType::kI32,
                              "top_k_arr (int32 or int64; a row's k <= 0 or >= vocab_size: "
                              "off), or the scalar top_k (>= 1) for every row"));
  }
  if (top_p) {
    d.inputs.push_back(tensor("top_p", {"batch_size"}, DType::kF32,
                              "top_p_arr (a row's p >= 1: off), or the scalar top_p in (0, 1] "
                              "for every row"));
  }
  if (min_p) {
    d.inputs.push_back(tensor("min_p", {"batch_size"}, DType::kF32,
                              "min_p_arr (a row's min_p <= 0: off), or the scalar min_p in "
                              "[0, 1] for every row"));
  }
  if (temperature) {
    d.inputs.push_back(tensor("temperature", {"batch_size"}, DType::kF32,
                              kind == K::kSoftmax
                                  ? "temperature_arr, or the scalar temperature for every row"
                                  : "temperature_arr, or the scalar temperature for every row; "
                                    "0: greedy"));
  }
  if (draws) {
    d.inputs.push_back(tensor("seed", {"batch_size"}, DType::kI64,
                              "Philox key (int64 or uint64): one element for every row, or one "
                              "per row"));
    d.inputs.push_back(tensor("offset", {"batch_size"}, DType::kI64,
                              "Philox counter (int64 or uint64): one element, or one per row"));
    d.outputs = {tensor("samples", {"batch_size"}, DType::kI64,
                        "the drawn token (int64 or int32); -1 for an invalid row"),
                 {"valid",
                  {"batch_size"},
                  false,
                  "bool",
                  "optional (uint8 or bool): 1 where the row was sampled"}};
  } else if (kind == K::kArgmax) {
    d.outputs = {tensor("out", {"batch_size"}, DType::kI64,
                        "index of the first maximum, NaN the largest (int64 or int32)")};
  } else {
    const DType out_dtype = kind == K::kTopKMaskLogits ? in_dtype : DType::kF32;
    d.outputs = {tensor("out", {"batch_size", "vocab_size"}, out_dtype,
                        kind == K::kSoftmax ? "probabilities; may be logits when that is fp32"
                        : kind == K::kTopKMaskLogits ? "logits inside the set, -inf outside; "
                                                       "may be logits"
                                                     : "probs / (mass of the set) inside it, 0 "
                                                       "outside; may be probs")};
  }

  const char* set = kind == K::kFromProbs            ? "every token"
                    : kind == K::kTopKFromProbs      ? "the top-k set (ties at the k-th kept)"
                    : kind == K::kTopPFromProbs      ? "the top-p set"
                    : kind == K::kMinPFromProbs      ? "the min-p set (p >= min_p * max p)"
                    : kind == K::kTopKTopPFromProbs  ? "the top-p set within the top-k set"
                    : kind == K::kTopKTopPFromLogits ? "the top-p set within the top-k set of "
                                                       "softmax(logits / temperature)"
                    : kind == K::kTopKRenormProbs || kind == K::kTopKMaskLogits
                        ? "the top-k set (ties at the k-th kept)"
                        : "the top-p set";
  if (draws) {
    d.description = fmt::format(
        "draws one token per row from {}, in proportion to its weight (Philox4x32-10 keyed by "
        "seed, counter (offset, row, 0)); no sort of the vocabulary",
        set);
  } else if (kind == K::kSoftmax) {
    d.description = "out = softmax(logits / temperature) per row, in fp32";
  } else if (kind == K::kArgmax) {
    d.description = "out = index of the largest element of each row (the first on ties)";
  } else if (kind == K::kTopKMaskLogits) {
    d.description = fmt::format("keeps the logits of {} and sets the others to -inf", set);
  } else {
    d.description = fmt::format("renormalizes each row over {}", set);
  }
  d.reference =
      kind == K::kSoftmax  ? "tools/devkit/reference/sampling_ref.hpp: ref::softmax"
      : kind == K::kArgmax ? "tools/devkit/reference/sampling_ref.hpp: ref::argmax"
      : kind == K::kTopKTopPFromLogits
          ? "tools/devkit/reference/sampling_ref.hpp: ref::softmax, ref::keep_sets, "
            "ref::sampling_uniform, ref::inverse_cdf"
      : draws ? "tools/devkit/reference/sampling_ref.hpp: ref::keep_sets, ref::sampling_uniform, "
                "ref::inverse_cdf"
      : kind == K::kTopKMaskLogits
          ? "tools/devkit/reference/sampling_ref.hpp: ref::keep_sets (on the logits)"
          : "tools/devkit/reference/sampling_ref.hpp: ref::keep_sets, ref::target_distribution";
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
  } else if (op == "decode_attention") {
    // Llama 3 8B / Mistral 7B (32 / 8), Llama 3 70B / Qwen 2.5 72B (64 / 8), Qwen 2.5 7B (28 / 4)
    // at the page sizes of paged engines (16) and of token-granular ones (1); the 8B shape also
    // in the HND layout and with an fp8 cache.
    struct Heads {
      int q, k;
    };
    for (const Heads h : {Heads{32, 8}, Heads{64, 8}, Heads{28, 4}}) {
      for (int ps : {16, 1}) out.push_back(batch_decode_definition({bf, false, h.q, h.k, 128, ps}));
    }
    out.push_back(batch_decode_definition({bf, false, 32, 8, 128, 16, false}));
    out.push_back(batch_decode_definition({bf, true, 32, 8, 128, 16}));
  } else if (op == "merge_states") {
    // Per query head: the qo head counts above.
    for (bool n_way : {false, true}) {
      for (int h : {32, 64, 28}) out.push_back(merge_states_definition(bf, h, 128, n_way));
    }
  } else if (op == "sampling_filter" || op == "softmax" || op == "argmax") {
    // Llama 3 (128256), Qwen 2 / 2.5 (151936), Llama 2 / Mistral (32000). Engines upcast the
    // logits to fp32 before sampling, so the logits definitions are fp32.
    using K = SamplingKind;
    std::vector<K> kinds;
    if (op == "softmax") {
      kinds = {K::kSoftmax};
    } else if (op == "argmax") {
      kinds = {K::kArgmax};
    } else {
      kinds = {K::kFromProbs,       K::kTopKFromProbs,     K::kTopPFromProbs,
               K::kMinPFromProbs,   K::kTopKTopPFromProbs, K::kTopKTopPFromLogits,
               K::kTopKRenormProbs, K::kTopPRenormProbs,   K::kTopKMaskLogits};
    }
    for (K k : kinds) {
      for (int v : {128256, 151936, 32000}) {
        out.push_back(sampling_definition(k, DType::kF32, v));
      }
    }
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
