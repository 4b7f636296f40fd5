// See fused_quant_desc.hpp.
#include "ops/quant/fused_quant_desc.hpp"

#include <string>
#include <vector>

#include "ops/quant/fused_quant_fp8.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

// Neither op exports a definition yet, so no definition names one to warm up.
std::vector<SetArgs> no_precompile(const Definition& d, const VarAxes&) {
  fail(KJIT_ERROR_INVALID_ARGUMENT, "definition '{}' is not a fused fp8 quantization's", d.name);
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
  d.definitions = [] { return std::vector<Definition>{}; };
  d.precompile_sets = no_precompile;
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
  d.definitions = [] { return std::vector<Definition>{}; };
  d.precompile_sets = no_precompile;
  return d;
}

}  // namespace kjit::ops
