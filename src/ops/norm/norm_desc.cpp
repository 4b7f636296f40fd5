// See norm_desc.hpp.
#include "ops/norm/norm_desc.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "diag/trace_dump.hpp"
#include "ops/norm/layernorm.hpp"
#include "ops/norm/norm.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using namespace def;
using ojson = nlohmann::ordered_json;

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

// The --set axes every norm has after its dtypes: hidden, align and rows (with its own help).
std::vector<AxisDef> row_axes(const char* rows_help) {
  return {{"hidden", {}, true, "row length (any size 1..262144)"},
          {"align",
           {"16", "8", "4", "2"},
           false,
           "byte alignment of pointers and row strides (default 16)"},
          {"rows", {}, false, rows_help}};
}

// The row counts a warm-up covers: the call's, or (any) one of each regime the norms select by:
// one vector a thread (<= kNormDecodeGeometryMaxRows), parameters before the PDL wait (<=
// kNormEarlyParamsMaxRows) and many rows. Values that select the same specialization give one.
std::vector<SetArgs> with_rows(const SetArgs& base, const VarAxes& axes) {
  std::vector<int64_t> rows = {1, kNormDecodeGeometryMaxRows + 1, kNormManyRows};
  if (auto r = var_axis(axes, "batch_size")) rows = {*r};
  std::vector<SetArgs> out;
  for (int64_t r : rows) {
    out.push_back(base);
    if (r < kNormManyRows) out.back()["rows"] = std::to_string(r);
  }
  return out;
}

// The --set axes and catalog shape both RMSNorm ops share.
OpDef row_norm_op_def(const char* name, const char* summary,
                      jit::Spec (*spec)(const RmsNormConfig&),
                      RmsNormConfig (*select)(DType, int64_t, int, int64_t, const NormTuning&),
                      std::vector<int> catalog_hiddens,
                      Definition (*definition)(DType, int64_t, bool)) {
  OpDef d;
  d.name = name;
  d.summary = summary;
  d.axes = {{"dtype", {"bf16", "fp16", "fp32"}, true, "activation/weight dtype"}};
  for (AxisDef& a : row_axes("row count the call has (default: many); <= 256 reads the weight "
                             "before the PDL wait (decode sizes)")) {
    d.axes.push_back(std::move(a));
  }
  d.arch_families = {"sm_80+"};
  d.make_spec = [d, spec, select](const SetArgs& args) {
    check_set_args(d, args);
    DType dtype = dtype_from_name(args.at("dtype"));
    int64_t hidden = positive_int_arg(args, "hidden", kRmsNormMaxHidden);
    int align = args.count("align") ? std::stoi(args.at("align")) : 16;
    const int64_t rows =
        args.count("rows") ? positive_int_arg(args, "rows", kNormManyRows) : kNormManyRows;
    return spec(select(dtype, hidden, align, rows, NormTuning{}));
  };
  d.catalog = [catalog_hiddens] {
    std::vector<SetArgs> out;
    for (const char* dt : {"bf16", "fp16", "fp32"}) {
      for (int h : catalog_hiddens) out.push_back({{"dtype", dt}, {"hidden", std::to_string(h)}});
    }
    // Decode-size row counts: the weight read before the PDL wait.
    for (const char* dt : {"bf16", "fp16"}) {
      for (int h : {2048, 4096, 8192}) {
        out.push_back({{"dtype", dt}, {"hidden", std::to_string(h)}, {"rows", "1"}});
      }
    }
    return out;
  };
  // Gemma's form runs the same kernels (the + 1 is a launch argument).
  d.precompile_sets = [](const Definition& def, const VarAxes& axes) {
    return with_rows({{"dtype", dtype_name(def.tensor_dtype("input"))},
                      {"hidden", std::to_string(def.const_axis("hidden_size"))}},
                     axes);
  };
  // Realistic definitions: the hidden sizes of Llama 3.x, Qwen 2.5, Mistral, DeepSeek-V3 (bf16),
  // and of Gemma 2 for the Gemma form.
  d.definitions = [definition] {
    std::vector<Definition> out;
    for (int h : {2048, 3072, 4096, 5120, 7168, 8192}) {
      out.push_back(definition(DType::kBF16, h, false));
    }
    for (int h : {2304, 3584, 4608}) out.push_back(definition(DType::kBF16, h, true));
    return out;
  };
  return d;
}

}  // namespace

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

OpDef rmsnorm_op_def() {
  // Hidden sizes of common models (Llama, Mistral, Qwen, Gemma 2 (2304, 3584, 4608), DeepSeek),
  // plus odd sizes that take the narrow-vector and scalar paths.
  return row_norm_op_def("rmsnorm", "out = x * rsqrt(mean(x^2) + eps) * weight over the last dim",
                         rmsnorm_spec, select_rmsnorm,
                         {1, 127, 512, 1024, 2048, 2304, 2560, 3072, 3584, 4096, 4097, 4608, 5120,
                          7168, 8192, 12288, 16384, 65537},
                         rmsnorm_definition);
}

OpDef fused_add_rmsnorm_op_def() {
  // Where the fused form is used: the hidden sizes of decoder layers (Llama 3 8B/70B/405B,
  // Mistral 7B / Large, Qwen2.5 0.5B..72B, Gemma 2/3 (2304, 3584, 4608), DeepSeek-V3), plus odd
  // sizes for the narrow-vector, scalar and long-row (two-pass) paths.
  return row_norm_op_def(
      "fused_add_rmsnorm",
      "residual += x; x = rmsnorm(residual) * (weight [+ 1]) over the last dim, in place",
      fused_add_rmsnorm_spec, select_fused_add_rmsnorm,
      {127, 896, 2048, 2304, 3072, 3584, 4096, 4097, 4608, 5120, 7168, 8192, 16384, 65537},
      fused_add_rmsnorm_definition);
}

OpDef layernorm_op_def() {
  OpDef d;
  d.name = "layernorm";
  d.summary = "out = (x - mean) * rsqrt(var + eps) * gamma + beta over the last dim";
  d.axes = {
      {"dtype", {"bf16", "fp16", "fp32"}, true, "input/out dtype"},
      {"wdtype", {"bf16", "fp16", "fp32"}, false, "gamma/beta dtype: dtype (the default) or fp32"}};
  for (AxisDef& a : row_axes("row count the call has (default: many); <= 128 gives long rows one "
                             "vector a thread, <= 256 reads gamma / beta before the PDL wait")) {
    d.axes.push_back(std::move(a));
  }
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    DType dtype = dtype_from_name(args.at("dtype"));
    DType wdtype = args.count("wdtype") ? dtype_from_name(args.at("wdtype")) : dtype;
    int64_t hidden = positive_int_arg(args, "hidden", kLayerNormMaxHidden);
    int align = args.count("align") ? std::stoi(args.at("align")) : 16;
    const int64_t rows =
        args.count("rows") ? positive_int_arg(args, "rows", kNormManyRows) : kNormManyRows;
    return layernorm_spec(select_layernorm(dtype, wdtype, hidden, align, align, rows));
  };
  d.catalog = [] {
    std::vector<SetArgs> out;
    // Hidden sizes of LayerNorm models (BERT/RoBERTa 768/1024, GPT-2/NeoX 2048, Phi-2 2560,
    // Falcon / StarCoder 4096, 6144 (StarCoder2 15B) and 8192), plus odd sizes for the
    // narrow-vector, scalar and long-row paths.
    for (const char* dt : {"bf16", "fp16", "fp32"}) {
      for (int h : {1, 127, 768, 1024, 2048, 2560, 4096, 4097, 6144, 8192, 65537}) {
        out.push_back({{"dtype", dt}, {"hidden", std::to_string(h)}});
      }
    }
    // Decode-size row counts: one vector a thread, gamma / beta before the PDL wait.
    for (const char* dt : {"bf16", "fp16"}) {
      for (int h : {2048, 4096, 8192}) {
        out.push_back({{"dtype", dt}, {"hidden", std::to_string(h)}, {"rows", "1"}});
      }
    }
    // fp32 gamma/beta beside 16-bit activations (mixed-precision checkpoints).
    for (const char* dt : {"bf16", "fp16"}) {
      for (int h : {768, 1024, 4096, 8192}) {
        out.push_back({{"dtype", dt}, {"wdtype", "fp32"}, {"hidden", std::to_string(h)}});
      }
    }
    return out;
  };
  d.precompile_sets = [](const Definition& def, const VarAxes& axes) {
    return with_rows({{"dtype", dtype_name(def.tensor_dtype("input"))},
                      {"wdtype", dtype_name(def.tensor_dtype("gamma"))},
                      {"hidden", std::to_string(def.const_axis("hidden_size"))}},
                     axes);
  };
  d.definitions = [] {
    std::vector<Definition> out;
    for (int h : {2560, 4096, 6144, 8192}) {
      out.push_back(layernorm_definition(DType::kBF16, DType::kBF16, h));
    }
    return out;
  };
  return d;
}

namespace trace {

namespace {

// The RMSNorm ops' hook: `op` is the registry op and its `kjit-cli bench`.
void record_row_norm(const char* op, Definition (*definition)(DType, int64_t, bool), DType dtype,
                     int64_t hidden, int64_t rows, bool gemma) noexcept {
  ojson set = {{"dtype", dtype_name(dtype)},
               {"hidden", std::to_string(hidden)},
               {"rows", std::to_string(rows)}};
  if (gemma) set["gemma"] = "1";
  record(fmt::format("{}{}_h{}{}", gemma ? "gemma_" : "", op, hidden,
                     dtype == DType::kBF16 ? "" : std::string("_") + dtype_name(dtype)),
         {{"batch_size", rows}}, op, set, [&] { return definition(dtype, hidden, gemma); });
}

}  // namespace

void rmsnorm(DType dtype, int64_t hidden, int64_t rows, bool gemma) noexcept {
  record_row_norm("rmsnorm", rmsnorm_definition, dtype, hidden, rows, gemma);
}

void fused_add_rmsnorm(DType dtype, int64_t hidden, int64_t rows, bool gemma) noexcept {
  record_row_norm("fused_add_rmsnorm", fused_add_rmsnorm_definition, dtype, hidden, rows, gemma);
}

void layernorm(DType dtype, DType param_dtype, int64_t hidden, int64_t rows) noexcept {
  // The name is cheap next to the definition, but not free: build it once per call here.
  const Definition d = layernorm_definition(dtype, param_dtype, hidden);
  record(d.name, {{"batch_size", rows}}, "layernorm",
         {{"dtype", dtype_name(dtype)},
          {"wdtype", dtype_name(param_dtype)},
          {"hidden", std::to_string(hidden)},
          {"rows", std::to_string(rows)}},
         [&] { return d; });
}

}  // namespace trace

}  // namespace kjit::ops
