// See gemm_desc.hpp.
#include "ops/gemm/gemm_desc.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <limits>
#include <string>
#include <vector>

#include "ops/gemm/gemm.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {
using namespace def;

// The realistic (n, k) of Llama-3-8B / 70B-class linear layers (bench/suites/gemm.jsonl's).
constexpr int64_t kDefinitionShapes[][2] = {
    {28672, 4096}, {4096, 14336}, {6144, 4096}, {8192, 8192}};

std::string gemm_name(DType dtype, DType out_dtype, int64_t n, int64_t k, bool bias) {
  return fmt::format("gemm_n{}_k{}{}{}{}", n, k, dtype_suffix(dtype),
                     out_dtype == dtype ? "" : std::string("_out_") + dtype_name(out_dtype),
                     bias ? "_bias" : "");
}
}  // namespace

Definition gemm_definition(DType dtype, DType out_dtype, int64_t n, int64_t k, bool bias) {
  Definition d;
  d.name = gemm_name(dtype, out_dtype, n, k, bias);
  d.op_type = "gemm";
  d.op = "gemm";
  d.entry = "kjit_gemm";
  d.description = std::string("out = alpha * a . b^T + beta * out") + (bias ? " + bias" : "") +
                  " (PyTorch Linear: b is the weight), fp32 accumulation";
  d.axes = {var("m", "rows of a: tokens"), constant("n", n, "output features (b's rows)"),
            constant("k", k, "input features")};
  d.inputs = {tensor("a", {"m", "k"}, dtype, "activations"),
              tensor("b", {"n", "k"}, dtype, "weight, row-major [n, k]")};
  if (bias) d.inputs.push_back(tensor("bias", {"n"}, dtype, "added to every row"));
  d.inputs.push_back(scalar("alpha", "options->alpha (default 1)"));
  d.inputs.push_back(scalar("beta", "options->beta (default 0: out is only written)"));
  d.outputs = {tensor("out", {"m", "n"}, out_dtype, "the product")};
  d.reference = "tools/devkit/reference/gemm_ref.hpp: ref::gemm_element";
  return d;
}

OpDef gemm_op_def() {
  OpDef d;
  d.name = "gemm";
  d.summary = "out = alpha * a . b^T + beta * out + bias (a [m, k], b [n, k]), bf16/fp16 in";
  d.axes = {
      {"path", {"sm90", "simt"}, true, "sm90: TMA + wgmma (sm_90a); simt: fp32 FMA, any arch"},
      {"dtype", {"bf16", "fp16"}, true, "a, b and bias dtype"},
      {"out_dtype", {"bf16", "fp16", "fp32"}, true, "out dtype"},
      {"bn", {"128", "256"}, false, "sm90: output tile width (default 128)"},
      {"stages",
       {"2", "3", "4", "5", "6"},
       false,
       "sm90: pipeline stages (default 6 at bn=128, 4 at bn=256)"}};
  d.arch_families = {"sm_80+", "sm_90a"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    GemmConfig c;
    c.path = args.at("path") == "sm90" ? GemmPath::kSm90 : GemmPath::kSimt;
    c.dtype = dtype_from_name(args.at("dtype"));
    c.out_dtype = dtype_from_name(args.at("out_dtype"));
    const bool tile_args = args.count("bn") != 0 || args.count("stages") != 0;
    if (c.path == GemmPath::kSimt) {
      if (tile_args) fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm: bn and stages are sm90 settings");
      return gemm_spec(c);
    }
    c.bn = args.count("bn") != 0 ? std::stoi(args.at("bn")) : 128;
    c.stages = args.count("stages") != 0 ? std::stoi(args.at("stages")) : (c.bn == 256 ? 4 : 6);
    return gemm_spec(c);
  };
  d.catalog = [] {
    // What select_gemm picks for bf16 / fp16 models: both tile widths of the sm90 path with out in
    // the input dtype or fp32, and the fallback for the same pairs.
    std::vector<SetArgs> out;
    for (const char* dt : {"bf16", "fp16"}) {
      for (const char* od : {dt, "fp32"}) {
        out.push_back({{"path", "sm90"}, {"dtype", dt}, {"out_dtype", od}, {"bn", "128"}});
        out.push_back({{"path", "sm90"}, {"dtype", dt}, {"out_dtype", od}, {"bn", "256"}});
        out.push_back({{"path", "simt"}, {"dtype", dt}, {"out_dtype", od}});
      }
    }
    return out;
  };
  // The fallback, and the sm90 tiles select_gemm gives the call's m (any: a decode and a prefill
  // m) on a device that takes the wgmma path; whether a device does (its shared memory, the
  // operands' alignment) is known at the call. The bias is a launch argument.
  d.precompile_sets = [](const Definition& def, const VarAxes& axes) {
    const DType dtype = def.tensor_dtype("a");
    const DType od = def.tensor_dtype("out");
    const int64_t n = def.const_axis("n"), k = def.const_axis("k");
    std::vector<int64_t> ms = {1, 512};
    if (auto m = var_axis(axes, "m")) ms = {*m};
    GemmTarget wgmma;
    wgmma.cc_major = 9;
    wgmma.max_smem_optin = std::numeric_limits<int>::max();
    wgmma.tma_ok = true;
    std::vector<SetArgs> out = {
        {{"path", "simt"}, {"dtype", dtype_name(dtype)}, {"out_dtype", dtype_name(od)}}};
    for (int64_t m : ms) {
      const GemmConfig c = select_gemm(dtype, od, m, n, k, wgmma);
      if (c.path != GemmPath::kSm90) continue;  // past the TMA limits: the fallback's shape
      out.push_back({{"path", "sm90"},
                     {"dtype", dtype_name(dtype)},
                     {"out_dtype", dtype_name(od)},
                     {"bn", std::to_string(c.bn)},
                     {"stages", std::to_string(c.stages)}});
    }
    return out;
  };
  d.definitions = [] {
    std::vector<Definition> out;
    for (const auto& s : kDefinitionShapes) {
      out.push_back(gemm_definition(DType::kBF16, DType::kBF16, s[0], s[1], false));
    }
    return out;
  };
  return d;
}

namespace trace {

void gemm(DType dtype, DType out_dtype, int64_t m, int64_t n, int64_t k, bool bias) noexcept {
  // `kjit-cli bench gemm` times the product without a bias: a call with one has no bench row.
  record(gemm_name(dtype, out_dtype, n, k, bias), {{"m", m}}, bias ? nullptr : "gemm",
         {{"dtype", dtype_name(dtype)},
          {"out_dtype", dtype_name(out_dtype)},
          {"m", std::to_string(m)},
          {"n", std::to_string(n)},
          {"k", std::to_string(k)}},
         [&] { return gemm_definition(dtype, out_dtype, n, k, bias); });
}

}  // namespace trace

}  // namespace kjit::ops
