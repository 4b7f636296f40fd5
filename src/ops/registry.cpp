#include "ops/registry.hpp"

#include <algorithm>

#include "ops/activation/activation_desc.hpp"
#include "ops/attention/attention_desc.hpp"
#include "ops/attention/prefill_desc.hpp"
#include "ops/embedding/embedding_desc.hpp"
#include "ops/gemm/gemm_desc.hpp"
#include "ops/gemm/gemm_fp8_desc.hpp"
#include "ops/kv_cache/kv_cache_desc.hpp"
#include "ops/moe/moe_desc.hpp"
#include "ops/norm/norm_desc.hpp"
#include "ops/quant/fused_quant_desc.hpp"
#include "ops/quant/quant_desc.hpp"
#include "ops/rope/rope_desc.hpp"
#include "ops/sampling/sampling_desc.hpp"
#include "ops/comm/comm_desc.hpp"
#include "util/error.hpp"

namespace kjit::ops {

const std::vector<OpDef>& op_registry() {
  // Each family's descriptor (src/ops/<family>/<family>_desc.cpp) builds its OpDefs.
  static const std::vector<OpDef> defs = {rmsnorm_op_def(),
                                          fused_add_rmsnorm_op_def(),
                                          layernorm_op_def(),
                                          act_and_mul_op_def(),
                                          rope_op_def(),
                                          append_paged_kv_op_def(),
                                          decode_attention_op_def(),
                                          prefill_attention_op_def(),
                                          merge_states_op_def(),
                                          sampling_filter_op_def(),
                                          softmax_op_def(),
                                          argmax_op_def(),
                                          chain_speculative_op_def(),
                                          gemm_op_def(),
                                          gemm_fp8_op_def(),
                                          quant_fp8_op_def(),
                                          embedding_op_def(),
                                          rmsnorm_quant_fp8_op_def(),
                                          silu_and_mul_quant_fp8_op_def(),
                                          moe_route_op_def(),
                                          moe_permute_op_def(),
                                          moe_finalize_op_def(),
                                          moe_grouped_gemm_op_def(),
                                          rope_append_op_def(),
                                          qk_norm_rope_op_def(),
                                          moe_grouped_gemm_fp8_op_def(),
                                          top_k_op_def(),
                                          all_reduce_op_def(),
                                          all_reduce_add_rmsnorm_op_def()};
  return defs;
}

const OpDef* find_op(std::string_view name) {
  for (const auto& d : op_registry()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

const OpDef& op_or_throw(std::string_view name) {
  if (const OpDef* d = find_op(name)) return *d;
  std::string known;
  for (const auto& d : op_registry()) known += " " + d.name;
  fail(KJIT_ERROR_INVALID_ARGUMENT, "no op '{}' (ops:{})", name, known);
}

SetArgs parse_set_list(std::string_view text) {
  SetArgs out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t end = text.find_first_of(", \t\n", i);
    const std::string_view pair = text.substr(i, end == std::string_view::npos ? end : end - i);
    i = end == std::string_view::npos ? text.size() : end + 1;
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "parameter '{}': expected name=value", pair);
    }
    if (!out.emplace(std::string(pair.substr(0, eq)), std::string(pair.substr(eq + 1))).second) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "parameter '{}' given twice", pair.substr(0, eq));
    }
  }
  return out;
}

void check_set_args(const OpDef& def, const SetArgs& args) {
  for (const auto& [k, v] : args) {
    // Named capture: clang before 16 cannot capture a structured binding.
    auto it = std::find_if(def.axes.begin(), def.axes.end(),
                           [&name = k](auto& a) { return a.name == name; });
    if (it == def.axes.end()) {
      std::string names;
      for (const auto& a : def.axes) names += " " + a.name;
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} has no parameter '{}' (has:{})", def.name, k, names);
    }
    if (!it->values.empty() &&
        std::find(it->values.begin(), it->values.end(), v) == it->values.end()) {
      std::string allowed;
      for (const auto& a : it->values) allowed += " " + a;
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{}: {}={} is not one of:{}", def.name, k, v, allowed);
    }
  }
  for (const auto& a : def.axes) {
    if (a.required && args.find(a.name) == args.end()) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "{} needs --set {}=<{}>", def.name, a.name,
           a.values.empty() ? "int" : "value");
    }
  }
}

std::optional<int64_t> var_axis(const VarAxes& axes, const std::string& name) {
  auto it = axes.find(name);
  if (it == axes.end()) return std::nullopt;
  return it->second;
}

long long positive_int_arg(const SetArgs& args, const std::string& name, long long max) {
  auto it = args.find(name);
  if (it == args.end()) fail(KJIT_ERROR_INVALID_ARGUMENT, "missing parameter '{}'", name);
  const std::string& s = it->second;
  long long v = 0;
  bool ok = !s.empty() && s.size() <= 12;
  for (char c : s) {
    ok = ok && c >= '0' && c <= '9';
    if (ok) v = v * 10 + (c - '0');
  }
  if (!ok || v <= 0 || v > max) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{}={} must be an integer in 1..{}", name, s, max);
  }
  return v;
}

int arch_smem_per_sm_kb(const jit::ArchTarget& target) {
  if (target.major == 8) return target.minor == 0 || target.minor == 7 ? 164 : 100;
  if (target.major == 12) return 100;
  return 228;
}

}  // namespace kjit::ops
