// See gemm_fp8_desc.hpp.
#include "ops/gemm/gemm_fp8_desc.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ops/gemm/gemm_desc.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {
using namespace def;

std::string gemm_fp8_name(DType out_dtype, const std::string& mode, int64_t n, int64_t k) {
  return fmt::format("gemm_fp8_n{}_k{}_{}{}", n, k, mode,
                     out_dtype == DType::kBF16 ? "" : std::string("_out_") + dtype_name(out_dtype));
}
}  // namespace

const char* fp8_scale_mode(Fp8Scales scales, bool a_per_row, bool b_per_row, int64_t m, int64_t n) {
  if (scales == Fp8Scales::kBlock) return "block";
  if (!a_per_row && !b_per_row) return "tensor";
  // A side with one row reads the same either way.
  return (a_per_row || m == 1) && (b_per_row || n == 1) ? "row" : "mixed";
}

Definition gemm_fp8_definition(DType out_dtype, const std::string& mode, int64_t n, int64_t k) {
  Definition d;
  d.name = gemm_fp8_name(out_dtype, mode, n, k);
  d.op_type = "gemm";
  d.op = "gemm_fp8";
  d.entry = "kjit_gemm_fp8";
  d.description = "out = (a . b^T) dequantized by the scales (" + mode +
                  "), e4m3 operands, fp32 accumulation" +
                  (mode == "block" ? ", each 128-wide K chunk scaled on its own" : "");
  d.axes = {var("m", "rows of a: tokens"), constant("n", n, "output features (b's rows)"),
            constant("k", k, "input features")};
  d.inputs = {tensor("a", {"m", "k"}, DType::kE4M3, "activations"),
              tensor("b", {"n", "k"}, DType::kE4M3, "weight, row-major [n, k]")};
  if (mode == "block") {
    // Fixed by n and k, but sizes rather than parameters (const axes are named by their value).
    d.axes.push_back(var("k_blocks", "ceil(k / 128)"));
    d.axes.push_back(var("n_blocks", "ceil(n / 128)"));
    d.inputs.push_back(tensor("scale_a", {"m", "k_blocks"}, DType::kF32, "per 1 x 128 of a"));
    d.inputs.push_back(
        tensor("scale_b", {"n_blocks", "k_blocks"}, DType::kF32, "per 128 x 128 of b"));
  } else if (mode == "row") {
    d.inputs.push_back(tensor("scale_a", {"m"}, DType::kF32, "per row of a (token)"));
    d.inputs.push_back(tensor("scale_b", {"n"}, DType::kF32, "per row of b (channel)"));
  } else {
    d.axes.push_back(constant("one", 1, "a per-tensor scale"));
    d.inputs.push_back(tensor("scale_a", {"one"}, DType::kF32, "a's scale"));
    d.inputs.push_back(tensor("scale_b", {"one"}, DType::kF32, "b's scale"));
  }
  d.inputs.push_back(scalar("alpha", "options->alpha (default 1)"));
  d.inputs.push_back(scalar("beta", "options->beta (default 0: out is only written)"));
  d.outputs = {tensor("out", {"m", "n"}, out_dtype, "the product")};
  d.reference =
      "tools/devkit/reference/gemm_ref.hpp: ref::gemm_element, ref::gemm_fp8_error_bound (on the "
      "operands dequantized: e4m3 value times scale)";
  return d;
}

OpDef gemm_fp8_op_def() {
  OpDef d;
  d.name = "gemm_fp8";
  d.summary =
      "out = dequant(a) . dequant(b)^T (e4m3 a [m, k], b [n, k]; tensor, row or block "
      "scales)";
  d.axes = {
      {"path",
       {"sm90", "simt", "sm80", "decode"},
       true,
       "sm90: TMA + wgmma (sm_90a); simt: fp32 FMA, any arch; sm80: mma.sync e4m3 (sm_89+); "
       "decode: the weight streamed as wgmma's M side, K split over a cluster (sm_90a, m <= 128)"},
      {"out_dtype", {"bf16", "fp16", "fp32"}, true, "out dtype"},
      {"scales",
       {"tensor_row", "block"},
       false,
       "sm90: tensor_row (per tensor / per row, default) or block (128-blocks, promoted per K "
       "chunk)"},
      {"stages",
       {"2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"},
       false,
       "sm90 (2-7): pipeline stages (default 6, 5 at bn=192, 4 at bn=256); sm80 (2-7): cp.async "
       "stages (default 4); decode: default the most its blocks per SM leave room for, up to the "
       "most one block holds (a forced decode_t<T>_s<N>_split<s>)"},
      {"tokens", {"16", "32", "64", "128"}, false, "decode: token tile (m <= tokens)"},
      {"bn",
       {"128", "192", "256"},
       false,
       "sm90: output tile width, 128 (default), 192 (tensor_row scales: select_gemm_fp8's "
       "choice on large shapes, the forced tactics sm90_bn192_s<N>[_p]) or 256 "
       "(its halves promoted in turn: select_gemm_fp8's choice with block scales on large "
       "shapes, the forced tactics sm90_bn256_s<N>[_p])"},
      {"persistent",
       {"0", "1"},
       false,
       "sm90: 1 = persistent blocks (min(tiles, SMs) blocks looping over the tiles; the forced "
       "tactic sm90_bn128_s6_p), default 0"},
      {"pair",
       {"0", "1"},
       false,
       "sm90 persistent: 1 = clusters of two blocks on adjacent row tiles sharing b's tile "
       "(TMA multicast; the forced sm90_*_p2 tactics), default 0"},
      {"tma_out",
       {"0", "1"},
       false,
       "sm90: 1 = the TMA-store epilogue (a bf16 / fp16 out staged in shared memory; "
       "kjit_gemm_fp8's choice for a TMA-ready out with beta 0; default stages then 4 at "
       "bn=192), default 0"}};
  d.arch_families = {"sm_80+", "sm_89+", "sm_90a"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    GemmFp8Config c;
    const std::string& path = args.at("path");
    c.path = path == "sm90"     ? GemmPath::kSm90
             : path == "sm80"   ? GemmPath::kMmaSm80
             : path == "decode" ? GemmPath::kSm90Decode
                                : GemmPath::kSimt;
    c.out_dtype = dtype_from_name(args.at("out_dtype"));
    const bool has_tokens = args.count("tokens") != 0;
    const bool persistent = args.count("persistent") != 0 && args.at("persistent") == "1";
    if (persistent && c.path != GemmPath::kSm90) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm_fp8: persistent is an sm90 setting");
    }
    const bool pair = args.count("pair") != 0 && args.at("pair") == "1";
    if (pair && !persistent) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "gemm_fp8: pair is a setting of the persistent sm90 kernel");
    }
    const bool tma_out = args.count("tma_out") != 0 && args.at("tma_out") == "1";
    if (tma_out && c.path != GemmPath::kSm90) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm_fp8: tma_out is an sm90 setting");
    }
    if (args.count("bn") != 0 && c.path != GemmPath::kSm90) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm_fp8: bn is an sm90 setting");
    }
    if (c.path == GemmPath::kSm90Decode) {
      c.scales = args.count("scales") != 0 && args.at("scales") == "block" ? Fp8Scales::kBlock
                                                                           : Fp8Scales::kTensorRow;
      c.tokens = has_tokens ? std::stoi(args.at("tokens")) : 16;
      c.stages = args.count("stages") != 0
                     ? std::stoi(args.at("stages"))
                     : gemm_fp8_decode_stages(c.tokens, cuda::kHopperSmemOptin);
      if (gemm::gemm_decode_smem_bytes(c.tokens, c.stages) > cuda::kHopperSmemOptin) {
        fail(KJIT_ERROR_INVALID_ARGUMENT,
             "gemm_fp8: {} stages of the {}-token decode tile exceed an SM's shared memory",
             c.stages, c.tokens);
      }
      return gemm_fp8_spec(c);
    }
    if (args.count("stages") != 0 && std::stoi(args.at("stages")) > 7) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm_fp8: stages above 7 are the decode path's");
    }
    if (has_tokens) fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm_fp8: tokens is a decode setting");
    if (c.path == GemmPath::kMmaSm80) {
      if (args.count("scales") != 0) {
        fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm_fp8: scales is an sm90 setting");
      }
      c.bn = 64;  // select_gemm_fp8's
      c.stages = args.count("stages") != 0 ? std::stoi(args.at("stages")) : 4;
      return gemm_fp8_spec(c);
    }
    if (c.path == GemmPath::kSimt) {
      if (args.count("stages") != 0 || args.count("scales") != 0) {
        fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm_fp8: scales and stages are sm90 settings");
      }
      return gemm_fp8_spec(c);
    }
    c.scales = args.count("scales") != 0 && args.at("scales") == "block" ? Fp8Scales::kBlock
                                                                         : Fp8Scales::kTensorRow;
    c.bn = args.count("bn") != 0 ? std::stoi(args.at("bn")) : 128;  // select_gemm_fp8's: 128
    if (!gemm_fp8_sm90_width_ok(c.bn, c.scales)) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "gemm_fp8: bn=192 takes tensor_row scales only");
    }
    // What kjit_gemm_fp8 sees for a TMA-ready out with beta 0 (tma_out).
    const GemmTarget hopper = hopper_gemm_target(tma_out);
    c.stages = args.count("stages") != 0 ? std::stoi(args.at("stages"))
                                         : sm90_stages_for(hopper, c.out_dtype, c.bn);
    c.persistent = pair ? 2 : persistent ? 1 : 0;
    c.tma_out = spec_tma_out("gemm_fp8", args, c.out_dtype, c.bn, c.stages) ? 1 : 0;
    return gemm_fp8_spec(c);
  };
  d.catalog = [] {
    // What select_gemm_fp8 picks: per tensor / row and blocks with out in bf16 or fp32, and the
    // fallback for the same outs.
    std::vector<SetArgs> out;
    for (const char* od : {"bf16", "fp32"}) {
      out.push_back({{"path", "sm90"}, {"out_dtype", od}});
      out.push_back({{"path", "sm90"}, {"out_dtype", od}, {"scales", "block"}});
      out.push_back({{"path", "simt"}, {"out_dtype", od}});
    }
    // The persistent form of the sm90 kernel at its default depth (the bench's forced
    // sm90_bn128_s6_p), both scale forms.
    for (const char* od : {"bf16", "fp32"}) {
      out.push_back({{"path", "sm90"}, {"out_dtype", od}, {"persistent", "1"}});
      out.push_back(
          {{"path", "sm90"}, {"out_dtype", od}, {"scales", "block"}, {"persistent", "1"}});
    }
    // The 192-wide tile (the forced sm90_bn192_s5 and its persistent form) with tensor_row
    // scales; the 256-wide one (the forced sm90_bn256_s4 and its persistent form) in both.
    for (const char* od : {"bf16", "fp32"}) {
      out.push_back({{"path", "sm90"}, {"out_dtype", od}, {"bn", "192"}, {"stages", "5"}});
      out.push_back({{"path", "sm90"},
                     {"out_dtype", od},
                     {"bn", "192"},
                     {"stages", "5"},
                     {"persistent", "1"}});
      for (const char* sc : {"tensor_row", "block"}) {
        SetArgs wide{{"path", "sm90"}, {"out_dtype", od}, {"scales", sc}, {"bn", "256"}};
        out.push_back(wide);
        wide["persistent"] = "1";
        out.push_back(wide);
      }
    }
    // With a bf16 out, what kjit_gemm_fp8 runs for a TMA-ready out and beta 0: the tiles above
    // (the 192-wide one at its 4 stages) with the TMA-store epilogue, alone, persistent and in
    // persistent pairs (the forced sm90_*_p2).
    for (const char* form : {"tile", "persistent", "pair"}) {
      SetArgs base{{"path", "sm90"}, {"out_dtype", "bf16"}, {"tma_out", "1"}};
      base["persistent"] = form == std::string("tile") ? "0" : "1";
      if (form == std::string("pair")) base["pair"] = "1";
      for (const char* sc : {"tensor_row", "block"}) {
        for (const char* bn : {"128", "256"}) {
          SetArgs a = base;
          a["scales"] = sc;
          a["bn"] = bn;
          out.push_back(std::move(a));
        }
      }
      SetArgs a = base;
      a["bn"] = "192";
      out.push_back(std::move(a));
    }
    for (const char* od : {"bf16", "fp32"}) out.push_back({{"path", "sm80"}, {"out_dtype", od}});
    // The decode path's every token tile in both scale forms; with a bf16 out also the deeper
    // ring of one block an SM where it is deeper (16-64 tokens: the forced
    // decode_t<T>_s<N>_split<s>; 128 tokens already runs one block an SM).
    for (const char* od : {"bf16", "fp32"}) {
      for (const char* tokens : {"16", "32", "64", "128"}) {
        out.push_back({{"path", "decode"}, {"out_dtype", od}, {"tokens", tokens}});
        out.push_back(
            {{"path", "decode"}, {"out_dtype", od}, {"tokens", tokens}, {"scales", "block"}});
        const int t = std::stoi(tokens);
        const int deep = gemm_decode_stages(t, cuda::kHopperSmemOptin, 1);
        if (od != std::string("bf16") ||
            deep == gemm_fp8_decode_stages(t, cuda::kHopperSmemOptin)) {
          continue;
        }
        for (const char* sc : {"tensor_row", "block"}) {
          out.push_back({{"path", "decode"},
                         {"out_dtype", od},
                         {"tokens", tokens},
                         {"scales", sc},
                         {"stages", std::to_string(deep)}});
        }
      }
    }
    return out;
  };
  // The fallback, the sm90 kernel with the definition's scales (block scales when it has
  // k_blocks), the mma.sync kernel and the decode kernel's token tiles; whether a device takes
  // the sm90 paths (sm_90a, TMA-ready operands) or the mma.sync one (sm_89+, 16-byte rows), and
  // between 64 and 128 rows whether the decode path (the SM count), is known at the call, so all
  // are included. Sizes are launch arguments.
  d.precompile_sets = [](const Definition& def, const VarAxes& axes) {
    const std::string od = dtype_name(def.tensor_dtype("out"));
    SetArgs sm90 = {{"path", "sm90"}, {"out_dtype", od}};
    if (def.axis("k_blocks") != nullptr) sm90["scales"] = "block";
    std::vector<SetArgs> out = {
        {{"path", "simt"}, {"out_dtype", od}}, sm90, {{"path", "sm80"}, {"out_dtype", od}}};
    if (od != "fp32") {  // a TMA-ready out with beta 0 takes the TMA-store epilogue
      SetArgs staged = sm90;
      staged["tma_out"] = "1";
      out.push_back(std::move(staged));
    }
    // The decode path's token tiles for the call's m (any: every one), at make_spec's depth.
    std::vector<int> tiles = {16, 32, 64, 128};
    if (auto m = var_axis(axes, "m")) {
      tiles.clear();
      if (*m >= 1 && *m <= gemm::kGemmDecodeMaxTokens) {
        int t = 16;
        while (t < *m) t *= 2;
        tiles.push_back(t);
      }
    }
    for (int t : tiles) {
      SetArgs a = sm90;
      a["path"] = "decode";
      a["tokens"] = std::to_string(t);
      out.push_back(std::move(a));
    }
    return out;
  };
  d.definitions = [] {
    std::vector<Definition> out;
    for (const char* mode : {"tensor", "row", "block"}) {
      for (const auto& s : kGemmDefinitionShapes) {
        out.push_back(gemm_fp8_definition(DType::kBF16, mode, s[0], s[1]));
      }
    }
    return out;
  };
  return d;
}

namespace trace {

void gemm_fp8(DType out_dtype, const char* mode, int64_t m, int64_t n, int64_t k) noexcept {
  // `kjit-cli bench gemm_fp8` times the three uniform modes; a mixed call has no bench row.
  const bool benched = std::string(mode) != "mixed";
  nlohmann::ordered_json axes = {{"m", m}};
  if (std::string(mode) == "block") {
    axes["k_blocks"] = (k + 127) / 128;
    axes["n_blocks"] = (n + 127) / 128;
  }
  record(gemm_fp8_name(out_dtype, mode, n, k), axes, benched ? "gemm_fp8" : nullptr,
         {{"out_dtype", dtype_name(out_dtype)},
          {"scales", mode},
          {"m", std::to_string(m)},
          {"n", std::to_string(n)},
          {"k", std::to_string(k)}},
         [&] { return gemm_fp8_definition(out_dtype, mode, n, k); });
}

}  // namespace trace

}  // namespace kjit::ops
