// The GEMM family's registry entry: what `kjit-cli compile / ops` and the compile tests see.
// Definitions and trace hooks for gemm are not written yet.
#include <string>
#include <vector>

#include "ops/gemm/gemm.hpp"
#include "util/error.hpp"

namespace kjit::ops {

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
  return d;
}

}  // namespace kjit::ops
