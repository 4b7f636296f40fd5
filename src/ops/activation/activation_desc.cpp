// See activation_desc.hpp.
#include "ops/activation/activation_desc.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "diag/trace_dump.hpp"
#include "ops/activation/activation.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using namespace def;

}  // namespace

Definition act_and_mul_definition(Act act, DType dtype, int64_t d_size) {
  const ActivationInfo& info = activation_info(act);
  Definition d;
  d.name = fmt::format("{}_d{}{}", info.op_type, d_size, dtype_suffix(dtype));
  d.op_type = info.op_type;
  d.op = "act_and_mul";
  d.entry = std::string("kjit_") + info.op_type;
  d.description =
      fmt::format("out = {}(gate) * up, where input = [gate | up] per row", info.formula);
  d.axes = {var("num_tokens", "rows"), constant("d", d_size, "output width (intermediate size)"),
            constant("two_d", 2 * d_size, "input width: gate and up side by side")};
  d.inputs = {tensor("input", {"num_tokens", "two_d"}, dtype, "[gate | up]")};
  d.outputs = {tensor("out", {"num_tokens", "d"}, dtype, "act(gate) * up")};
  d.reference = fmt::format(
      "tools/devkit/reference/activation_ref.hpp: ref::act_and_mul (ActKind::k{})", info.functor);
  return d;
}

OpDef act_and_mul_op_def() {
  OpDef d;
  d.name = "act_and_mul";
  std::vector<std::string> acts;
  for (const ActivationInfo& a : kActivations) acts.push_back(a.name);
  d.summary =
      fmt::format("out = act(x[..., :d]) * x[..., d:] ({}), d at run time", fmt::join(acts, ", "));
  d.axes = {{"act", acts, true, "activation of the gate half"},
            {"dtype", {"bf16", "fp16", "fp32"}, true, "input/out dtype"},
            {"vec",
             {"8", "4", "2", "1"},
             true,
             "elements per vector access; at most 16 bytes (fp32: 4)"}};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    const std::string& a = args.at("act");
    const std::string& dt = args.at("dtype");
    const Act act = find_activation(a)->act;  // check_set_args took it from the act axis
    DType dtype = dtype_from_name(dt);
    const int vec = std::stoi(args.at("vec"));
    const int elem = static_cast<int>(dtype_size(dtype));
    if (vec * elem > 16) {
      fail(KJIT_ERROR_UNSUPPORTED, "act_and_mul: vec={} x {} is wider than 16 bytes", vec, dt);
    }
    // d = vec and full alignment: select_act_and_mul then picks exactly this width.
    return act_and_mul_spec(select_act_and_mul(act, dtype, vec, vec * elem));
  };
  d.catalog = [] {
    // d is a run-time value, so this is every specialization there is: each activation x (bf16
    // and fp16 at 8/4/2/1, fp32 at 4/2/1), 11 each. The 16-byte widths serve every Llama /
    // Mistral / Qwen intermediate size; the narrower ones serve odd d and misaligned views.
    std::vector<SetArgs> out;
    for (const ActivationInfo& a : kActivations) {
      const char* act = a.name;
      for (const char* dt : {"bf16", "fp16", "fp32"}) {
        for (const char* v : {"8", "4", "2", "1"}) {
          if (std::string(dt) == "fp32" && std::string(v) == "8") continue;
          out.push_back({{"act", act}, {"dtype", dt}, {"vec", v}});
        }
      }
    }
    return out;
  };
  // The activation by the definition's op type; the vector width select_act_and_mul gives its d
  // with 16-byte aligned tensors. The row count selects nothing.
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    const ActivationInfo* info = nullptr;
    for (const ActivationInfo& a : kActivations) info = def.op_type == a.op_type ? &a : info;
    if (info == nullptr) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "definition {}: op type {} is no activation", def.name,
           def.op_type);
    }
    const DType dtype = def.tensor_dtype("input");
    const ActAndMulConfig c = select_act_and_mul(info->act, dtype, def.const_axis("d"), 16);
    return std::vector<SetArgs>{
        {{"act", info->name}, {"dtype", dtype_name(dtype)}, {"vec", std::to_string(c.vec)}}};
  };
  d.definitions = [] {
    std::vector<Definition> out;
    for (const ActivationInfo& a : kActivations) {
      for (int d : a.definition_d) {
        if (d > 0) out.push_back(act_and_mul_definition(a.act, DType::kBF16, d));
      }
    }
    return out;
  };
  return d;
}

namespace trace {

void act_and_mul(Act act, DType dtype, int64_t d, int64_t rows) noexcept {
  record(fmt::format("{}_d{}{}", activation_info(act).op_type, d,
                     dtype == DType::kBF16 ? "" : std::string("_") + dtype_name(dtype)),
         {{"num_tokens", rows}}, "act_and_mul",
         {{"act", act_name(act)},
          {"dtype", dtype_name(dtype)},
          {"d", std::to_string(d)},
          {"rows", std::to_string(rows)}},
         [&] { return act_and_mul_definition(act, dtype, d); });
}

}  // namespace trace

}  // namespace kjit::ops
