// See gemm_desc.hpp.
#include "ops/gemm/gemm_desc.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <limits>
#include <string>
#include <vector>

#include "cuda/launch.hpp"
#include "ops/gemm/gemm.hpp"
#include "ops/gemm/gemm_tactics.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {
using namespace def;

// Every compute capability 9.0 part (H100, H200, GH200) lets a block opt in to 227 KB: the
// decode path's default depth where no device is at hand (--set, the catalog).
using cuda::kHopperSmemOptin;

std::string gemm_name(DType dtype, DType out_dtype, int64_t n, int64_t k, bool bias) {
  return fmt::format("gemm_n{}_k{}{}{}{}", n, k, dtype_suffix(dtype),
                     out_dtype == dtype ? "" : std::string("_out_") + dtype_name(out_dtype),
                     bias ? "_bias" : "");
}
}  // namespace

bool spec_tma_out(const char* op, const SetArgs& args, DType out_dtype, int bn, int stages) {
  if (args.count("tma_out") == 0 || args.at("tma_out") != "1") return false;
  if (!gemm_tma_out(hopper_gemm_target(true), out_dtype, bn, stages)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "{}: tma_out takes a bf16 / fp16 out and stages whose ring leaves the epilogue's 32 KB "
         "of shared memory free",
         op);
  }
  return true;
}

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
  d.axes = {{"path",
             {"sm90", "decode", "simt", "sm80"},
             true,
             "sm90: TMA + wgmma (sm_90a); decode: the weight-streaming kernel for m <= 128 "
             "(sm_90a); simt: fp32 FMA, any arch; sm80: mma.sync + cp.async (the mma_sm80 path), "
             "any arch"},
            {"dtype", {"bf16", "fp16"}, true, "a, b and bias dtype"},
            {"out_dtype", {"bf16", "fp16", "fp32"}, true, "out dtype"},
            {"bn",
             {"128", "256", "64"},
             false,
             "sm90: output tile width (default 128); sm80: 64 or 128 (default 128)"},
            {"tokens", {"16", "32", "64", "128"}, false, "decode: token tile (m <= tokens)"},
            {"stages",
             {"2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"},
             false,
             "sm90 (2-6): pipeline stages (default 6 at bn=128, 4 at bn=256); decode: default the "
             "most that let two blocks share an SM, up to the most one block holds (the "
             "decode_t<T>_s<N>_split<s> tactics); sm80 (2-6): default 3 at bn=128, 4 at bn=64"},
            {"persistent",
             {"0", "1"},
             false,
             "sm90: 1 = persistent blocks (min(tiles, SMs) blocks looping over the tiles; the "
             "sm90_*_p tactics), default 0"},
            {"pair",
             {"0", "1"},
             false,
             "sm90 persistent: 1 = clusters of two blocks on adjacent row tiles sharing b's tile "
             "(TMA multicast; the sm90_*_p2 tactics), default 0"},
            {"tma_out",
             {"0", "1"},
             false,
             "sm90: 1 = the TMA-store epilogue (a bf16 / fp16 out staged in shared memory; "
             "kjit_gemm's choice for a TMA-ready out with beta 0), default 0"}};
  d.arch_families = {"sm_80+", "sm_90a"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    GemmConfig c;
    const std::string& path = args.at("path");
    c.path = path == "sm90"     ? GemmPath::kSm90
             : path == "decode" ? GemmPath::kSm90Decode
             : path == "sm80"   ? GemmPath::kMmaSm80
                                : GemmPath::kSimt;
    c.dtype = dtype_from_name(args.at("dtype"));
    c.out_dtype = dtype_from_name(args.at("out_dtype"));
    const bool has_stages = args.count("stages") != 0;
    const bool has_bn = args.count("bn") != 0;
    const bool has_tokens = args.count("tokens") != 0;
    const bool persistent = args.count("persistent") != 0 && args.at("persistent") == "1";
    if (persistent && c.path != GemmPath::kSm90) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm: persistent is an sm90 setting");
    }
    const bool pair = args.count("pair") != 0 && args.at("pair") == "1";
    if (pair && !persistent) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm: pair is a setting of the persistent sm90 kernel");
    }
    c.persistent = pair ? 2 : persistent ? 1 : 0;
    const bool tma_out = args.count("tma_out") != 0 && args.at("tma_out") == "1";
    if (tma_out && c.path != GemmPath::kSm90) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm: tma_out is an sm90 setting");
    }
    if (c.path == GemmPath::kSimt) {
      if (has_bn || has_stages || has_tokens) {
        fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm: bn, tokens and stages are sm90 settings");
      }
      return gemm_spec(c);
    }
    if (c.path == GemmPath::kSm90Decode) {
      if (has_bn) fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm: bn is an sm90 setting");
      c.tokens = has_tokens ? std::stoi(args.at("tokens")) : 16;
      c.stages = has_stages ? std::stoi(args.at("stages"))
                            : gemm_decode_stages(c.tokens, kHopperSmemOptin);
      if (gemm::gemm_decode_smem_bytes(c.tokens, c.stages) > kHopperSmemOptin) {
        fail(KJIT_ERROR_INVALID_ARGUMENT,
             "gemm: {} stages of the {}-token decode tile exceed an SM's shared memory", c.stages,
             c.tokens);
      }
      return gemm_spec(c);
    }
    if (has_stages && std::stoi(args.at("stages")) > 6) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm: stages above 6 are the decode path's");
    }
    if (has_tokens) fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm: tokens is a decode setting");
    c.bn = args.count("bn") != 0 ? std::stoi(args.at("bn")) : 128;
    if (c.path == GemmPath::kMmaSm80) {
      if (c.bn != 64 && c.bn != 128) {
        fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm: sm80's bn is 64 or 128");
      }
      c.stages = has_stages ? std::stoi(args.at("stages")) : gemm_mma_sm80_stages(c.bn);
      return gemm_spec(c);
    }
    if (c.bn == 64) fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm: sm90's bn is 128 or 256");
    c.stages = args.count("stages") != 0 ? std::stoi(args.at("stages")) : sm90_default_stages(c.bn);
    c.tma_out = spec_tma_out("gemm", args, c.out_dtype, c.bn, c.stages) ? 1 : 0;
    return gemm_spec(c);
  };
  d.catalog = [] {
    // What select_gemm picks for bf16 / fp16 models: both tile widths of the sm90 path (and their
    // persistent forms) and every token tile of the decode path with out in the input dtype or
    // fp32, and the fallback for the same pairs; then the mma_sm80 path's.
    std::vector<SetArgs> out;
    for (const char* dt : {"bf16", "fp16"}) {
      for (const char* od : {dt, "fp32"}) {
        for (const char* tokens : {"16", "32", "64", "128"}) {
          out.push_back({{"path", "decode"}, {"dtype", dt}, {"out_dtype", od}, {"tokens", tokens}});
          // The deeper ring the decode_t<T>_s<N> tactics time (one block an SM), so a tuning
          // run finds it compiled.
          const int t = std::stoi(tokens);
          out.push_back({{"path", "decode"},
                         {"dtype", dt},
                         {"out_dtype", od},
                         {"tokens", tokens},
                         {"stages", std::to_string(gemm_decode_stages(t, kHopperSmemOptin, 1))}});
        }
        out.push_back({{"path", "sm90"}, {"dtype", dt}, {"out_dtype", od}, {"bn", "128"}});
        out.push_back({{"path", "sm90"}, {"dtype", dt}, {"out_dtype", od}, {"bn", "256"}});
        // The persistent tactics' kernels (gemm_tactics.cpp: both tiles at their default depths),
        // so a tuning run times them without compiling.
        for (const char* bn : {"128", "256"}) {
          for (const char* pair : {"0", "1"}) {
            out.push_back({{"path", "sm90"},
                           {"dtype", dt},
                           {"out_dtype", od},
                           {"bn", bn},
                           {"persistent", "1"},
                           {"pair", pair}});
          }
        }
        // With a 16-bit out, what kjit_gemm runs for a TMA-ready out and beta 0: every one of
        // the six with the TMA-store epilogue.
        if (od != std::string("fp32")) {
          for (const char* bn : {"128", "256"}) {
            for (const char* form : {"tile", "persistent", "pair"}) {
              SetArgs a = {{"path", "sm90"}, {"dtype", dt}, {"out_dtype", od}, {"bn", bn}};
              if (form != std::string("tile")) a["persistent"] = "1";
              if (form == std::string("pair")) a["pair"] = "1";
              a["tma_out"] = "1";
              out.push_back(std::move(a));
            }
          }
        }
        out.push_back({{"path", "simt"}, {"dtype", dt}, {"out_dtype", od}});
      }
    }
    // The mma_sm80 path at both tile widths and their default depths (every sm_80+ device).
    for (const char* dt : {"bf16", "fp16"}) {
      for (const char* od : {dt, "fp32"}) {
        for (const char* bn : {"64", "128"}) {
          out.push_back({{"path", "sm80"}, {"dtype", dt}, {"out_dtype", od}, {"bn", bn}});
        }
      }
    }
    return out;
  };
  // The fallback, and what select_gemm gives the call's m (any: a decode, a 128-row and a
  // prefill m) on an sm_90a device with TMA-ready operands and on an sm_80 one, as make_spec's
  // defaults size them. Between 64 and kGemmDecodeMaxTokens rows the decode path (and the mma_sm80
  // tile width) depends on the device's SM count, so both answers are taken (few SMs, and more
  // than n has tiles); which device, and whether it takes the wgmma paths at all (the operands'
  // alignment), is known at the call. The bias is a launch argument.
  d.precompile_sets = [](const Definition& def, const VarAxes& axes) {
    const DType dtype = def.tensor_dtype("a");
    const DType od = def.tensor_dtype("out");
    const int64_t n = def.const_axis("n"), k = def.const_axis("k");
    std::vector<int64_t> ms = {1, gemm::kGemmDecodeMaxTokens, 512};
    if (auto m = var_axis(axes, "m")) ms = {*m};
    const SetArgs types = {{"dtype", dtype_name(dtype)}, {"out_dtype", dtype_name(od)}};
    std::vector<SetArgs> out = {types};
    out.back()["path"] = "simt";
    // The TMA-store epilogue where the call's out takes it (kjit_gemm's checks at the call).
    GemmTarget hopper = hopper_gemm_target(true);
    GemmTarget ampere = hopper;
    ampere.cc_major = 8;
    for (int64_t m : ms) {
      for (int sms : {0, std::numeric_limits<int>::max()}) {
        for (GemmTarget* t : {&hopper, &ampere}) {
          t->sm_count = sms;
          const GemmConfig c = select_gemm(dtype, od, m, n, k, *t);
          SetArgs a = types;
          a["path"] = gemm_path_name(c.path);
          if (c.path == GemmPath::kSm90 || c.path == GemmPath::kMmaSm80) {
            a["bn"] = std::to_string(c.bn);
          }
          if (c.persistent != 0) a["persistent"] = "1";
          if (c.tma_out != 0) a["tma_out"] = "1";
          if (c.path == GemmPath::kSm90Decode) a["tokens"] = std::to_string(c.tokens);
          if (c.path != GemmPath::kSimt) a["stages"] = std::to_string(c.stages);
          out.push_back(std::move(a));
        }
      }
    }
    return out;
  };
  d.tactic_space = kGemmTacticSpace;
  d.tactic_specs = gemm_tactic_specs;
  d.definitions = [] {
    std::vector<Definition> out;
    for (const auto& s : kGemmDefinitionShapes) {
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
