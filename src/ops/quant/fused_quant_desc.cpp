// See fused_quant_desc.hpp.
#include "ops/quant/fused_quant_desc.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "diag/definition.hpp"
#include "ops/quant/fused_quant_fp8.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {
using namespace def;

// The hidden sizes of the norm definitions and the GEMM definitions' intermediate d.
constexpr int64_t kDefinitionHidden[] = {4096, 8192};
constexpr int64_t kDefinitionD[] = {14336};

const char* rmsnorm_quant_op_type(bool residual) {
  return residual ? "fused_add_rmsnorm_quant_fp8" : "rmsnorm_quant_fp8";
}

std::string rmsnorm_quant_name(DType dtype, int64_t hidden, bool residual) {
  return fmt::format("{}_h{}{}", rmsnorm_quant_op_type(residual), hidden, dtype_suffix(dtype));
}

std::string silu_quant_name(DType dtype, int64_t dd) {
  return fmt::format("silu_and_mul_quant_fp8_d{}{}", dd, dtype_suffix(dtype));
}

Definition rmsnorm_quant_definition(DType dtype, int64_t hidden, bool residual) {
  Definition d;
  d.op_type = rmsnorm_quant_op_type(residual);
  d.name = rmsnorm_quant_name(dtype, hidden, residual);
  d.op = "rmsnorm_quant_fp8";
  d.entry = residual ? "kjit_fused_add_rmsnorm_quant_fp8" : "kjit_rmsnorm_quant_fp8";
  d.description = fmt::format(
      "{}y = rmsnorm(x) * weight in fp32; scale = amax(y) / 448 per row; out = e4m3(y / scale)",
      residual ? "residual += input (rounded to the dtype), x = residual; " : "");
  d.axes = {var("m", "rows: tokens"), constant("hidden", hidden, "hidden size")};
  d.inputs = {tensor("input", {"m", "hidden"}, dtype, "x"),
              tensor("weight", {"hidden"}, dtype, "per-column scale")};
  if (residual) {
    d.inputs.push_back(tensor("residual", {"m", "hidden"}, dtype, "the residual stream"));
  }
  d.inputs.push_back(scalar("eps", "added to the mean square"));
  if (residual) {
    d.outputs.push_back(tensor("residual", {"m", "hidden"}, dtype, "residual + input, in place"));
  }
  d.outputs.push_back(tensor("out", {"m", "hidden"}, DType::kE4M3, "quantized"));
  d.outputs.push_back(tensor("scale", {"m"}, DType::kF32, "amax / 448 per row"));
  d.reference =
      "tools/devkit/reference/fp8_ref.hpp: ref::fp8_scale, ref::quantize_e4m3 (of the fp64 "
      "rmsnorm; see tests/gpu/fused_quant_gpu_test.cpp)";
  return d;
}

Definition silu_quant_definition(DType dtype, int64_t dd) {
  Definition d;
  d.op_type = "silu_and_mul_quant_fp8";
  d.name = silu_quant_name(dtype, dd);
  d.op = "silu_and_mul_quant_fp8";
  d.entry = "kjit_silu_and_mul_quant_fp8";
  d.description =
      "y = silu(x[..., :d]) * x[..., d:] in fp32; scale = amax(y) / 448 per 1 x 128 group; out = "
      "e4m3(y / scale)";
  d.axes = {var("m", "rows: tokens"), constant("d", dd, "intermediate size"),
            constant("two_d", 2 * dd, "[gate | up]"),
            var("groups", "ceil(d / 128): fixed by d, a size rather than a parameter")};
  d.inputs = {tensor("input", {"m", "two_d"}, dtype, "[gate | up]")};
  d.outputs = {tensor("out", {"m", "d"}, DType::kE4M3, "quantized"),
               tensor("scale", {"m", "groups"}, DType::kF32, "amax / 448 per group")};
  d.reference =
      "tools/devkit/reference/fp8_ref.hpp: ref::fp8_scale, ref::quantize_e4m3 (of the fp64 "
      "silu(gate) * up; see tests/gpu/fused_quant_gpu_test.cpp)";
  return d;
}

}  // namespace

OpDef rmsnorm_quant_fp8_op_def() {
  OpDef d;
  d.name = "rmsnorm_quant_fp8";
  d.summary =
      "[residual += input;] e4m3 out, fp32 scale per row = amax / 448 of rmsnorm in fp32 "
      "(bf16/fp16 in)";
  d.axes = {{"dtype", {"bf16", "fp16"}, true, "input dtype"},
            {"vec", {"1", "2", "4", "8"}, true, "elements per access (from the alignment)"},
            {"residual", {"0", "1"}, true, "1: the residual add first"}};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    RmsNormQuantConfig c;
    c.dtype = dtype_from_name(args.at("dtype"));
    c.vec = static_cast<int>(positive_int_arg(args, "vec", 8));
    if (c.vec != 1 && c.vec != 2 && c.vec != 4 && c.vec != 8) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "vec is 1, 2, 4 or 8, not {}", c.vec);
    }
    c.residual = args.at("residual") == "1" ? 1 : 0;
    return rmsnorm_quant_fp8_spec(c);
  };
  d.catalog = [] {
    std::vector<SetArgs> out;
    for (const char* dt : {"bf16", "fp16"}) {
      for (const char* res : {"0", "1"})
        out.push_back({{"dtype", dt}, {"vec", "8"}, {"residual", res}});
    }
    return out;
  };
  d.definitions = [] {
    std::vector<Definition> out;
    for (bool residual : {false, true}) {
      for (int64_t h : kDefinitionHidden) {
        out.push_back(rmsnorm_quant_definition(DType::kBF16, h, residual));
      }
    }
    return out;
  };
  // The vector width of aligned rows of the definition's hidden size.
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    const int64_t hidden = def.const_axis("hidden");
    int vec = 8;
    while (vec > 1 && hidden % vec != 0) vec /= 2;
    const bool residual = def.entry == "kjit_fused_add_rmsnorm_quant_fp8";
    return std::vector<SetArgs>{{{"dtype", dtype_name(def.tensor_dtype("input"))},
                                 {"vec", std::to_string(vec)},
                                 {"residual", residual ? "1" : "0"}}};
  };
  return d;
}

OpDef silu_and_mul_quant_fp8_op_def() {
  OpDef d;
  d.name = "silu_and_mul_quant_fp8";
  d.summary =
      "e4m3 out, fp32 scale per 1 x 128 group = amax / 448 of silu(gate) * up in fp32 "
      "(bf16/fp16 in)";
  d.axes = {{"dtype", {"bf16", "fp16"}, true, "input dtype"}};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    return silu_and_mul_quant_fp8_spec(dtype_from_name(args.at("dtype")));
  };
  d.catalog = [] { return std::vector<SetArgs>{{{"dtype", "bf16"}}, {{"dtype", "fp16"}}}; };
  d.definitions = [] {
    std::vector<Definition> out;
    for (int64_t dd : kDefinitionD) out.push_back(silu_quant_definition(DType::kBF16, dd));
    return out;
  };
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    return std::vector<SetArgs>{{{"dtype", dtype_name(def.tensor_dtype("input"))}}};
  };
  return d;
}

namespace trace {

void rmsnorm_quant_fp8(DType dtype, bool residual, int64_t m, int64_t hidden) noexcept {
  const nlohmann::ordered_json axes = {{"m", m}};
  const nlohmann::ordered_json set = {{"dtype", dtype_name(dtype)},
                                      {"residual", residual ? "1" : "0"},
                                      {"m", std::to_string(m)},
                                      {"hidden", std::to_string(hidden)}};
  record(rmsnorm_quant_name(dtype, hidden, residual), axes, "rmsnorm_quant_fp8", set,
         [&] { return rmsnorm_quant_definition(dtype, hidden, residual); });
}

void silu_and_mul_quant_fp8(DType dtype, int64_t m, int64_t d) noexcept {
  const nlohmann::ordered_json axes = {{"m", m}, {"groups", (d + 127) / 128}};
  const nlohmann::ordered_json set = {
      {"dtype", dtype_name(dtype)}, {"m", std::to_string(m)}, {"d", std::to_string(d)}};
  record(silu_quant_name(dtype, d), axes, "silu_and_mul_quant_fp8", set,
         [&] { return silu_quant_definition(dtype, d); });
}

}  // namespace trace

}  // namespace kjit::ops
