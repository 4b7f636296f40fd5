// See quant_desc.hpp.
#include "ops/quant/quant_desc.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kjit::ops {

namespace {
using namespace def;

// Hidden sizes of the GEMM definitions' k (gemm_desc.cpp): the activations quantized before them.
constexpr int64_t kDefinitionK[] = {4096, 14336};

std::string quant_fp8_name(DType dtype, QuantScaling scaling, int64_t k) {
  return fmt::format("quant_fp8_{}_k{}{}", quant_scaling_name(scaling), k, dtype_suffix(dtype));
}
}  // namespace

Definition quant_fp8_definition(DType dtype, QuantScaling scaling, int64_t k) {
  Definition d;
  d.name = quant_fp8_name(dtype, scaling, k);
  d.op_type = "quant";
  d.op = "quant_fp8";
  d.entry = "kjit_quant_fp8";
  d.description = fmt::format(
      "scale = amax / 448 per {}, out = e4m3(input / scale) rounded to nearest even, saturated",
      scaling == QuantScaling::kGroup ? "1 x 128 group" : quant_scaling_name(scaling));
  d.axes = {var("m", "rows: tokens"), constant("k", k, "hidden size")};
  d.inputs = {tensor("input", {"m", "k"}, dtype, "activations")};
  d.outputs = {tensor("out", {"m", "k"}, DType::kE4M3, "quantized")};
  switch (scaling) {
    case QuantScaling::kTensor:
      d.axes.push_back(constant("one", 1, "one scale"));
      d.outputs.push_back(tensor("scale", {"one"}, DType::kF32, "amax / 448"));
      break;
    case QuantScaling::kRow:
      d.outputs.push_back(tensor("scale", {"m"}, DType::kF32, "amax / 448 per row"));
      break;
    case QuantScaling::kGroup:
      d.axes.push_back(var("groups", "ceil(k / 128): fixed by k, a size rather than a parameter"));
      d.outputs.push_back(tensor("scale", {"m", "groups"}, DType::kF32, "amax / 448 per group"));
      break;
  }
  d.reference = "tools/devkit/reference/fp8_ref.hpp: ref::fp8_scale, ref::quantize_e4m3";
  return d;
}

OpDef quant_fp8_op_def() {
  OpDef d;
  d.name = "quant_fp8";
  d.summary = "e4m3 out, fp32 scale = amax / 448 per tensor, row or 1 x 128 group (bf16/fp16 in)";
  d.axes = {{"dtype", {"bf16", "fp16"}, true, "input dtype"},
            {"scaling", {"tensor", "row", "group"}, true, "what one scale covers"}};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    return quant_fp8_spec(QuantFp8Config{dtype_from_name(args.at("dtype")),
                                         quant_scaling_from_name(args.at("scaling"))});
  };
  d.catalog = [] {
    std::vector<SetArgs> out;
    for (const char* dt : {"bf16", "fp16"}) {
      for (const char* sc : {"tensor", "row", "group"})
        out.push_back({{"dtype", dt}, {"scaling", sc}});
    }
    return out;
  };
  // The scaling by the scale's shape ([one], [m] or [m, groups]); sizes are launch arguments.
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    std::vector<std::string> shape;
    for (const auto& t : def.outputs) shape = t.name == "scale" ? t.shape : shape;
    const char* scaling = shape.size() == 2                   ? "group"
                          : !shape.empty() && shape[0] == "m" ? "row"
                                                              : "tensor";
    return std::vector<SetArgs>{
        {{"dtype", dtype_name(def.tensor_dtype("input"))}, {"scaling", scaling}}};
  };
  d.definitions = [] {
    std::vector<Definition> out;
    for (QuantScaling s : {QuantScaling::kTensor, QuantScaling::kRow, QuantScaling::kGroup}) {
      for (int64_t k : kDefinitionK) out.push_back(quant_fp8_definition(DType::kBF16, s, k));
    }
    return out;
  };
  return d;
}

namespace trace {

void quant_fp8(DType dtype, QuantScaling scaling, int64_t m, int64_t k) noexcept {
  nlohmann::ordered_json axes = {{"m", m}};
  if (scaling == QuantScaling::kGroup) axes["groups"] = (k + 127) / 128;
  record(quant_fp8_name(dtype, scaling, k), axes, "quant_fp8",
         {{"dtype", dtype_name(dtype)},
          {"scaling", quant_scaling_name(scaling)},
          {"m", std::to_string(m)},
          {"k", std::to_string(k)}},
         [&] { return quant_fp8_definition(dtype, scaling, k); });
}

}  // namespace trace

}  // namespace kjit::ops
