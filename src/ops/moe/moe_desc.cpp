// See moe_desc.hpp.
#include "ops/moe/moe_desc.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cuda/launch.hpp"
#include "gemm/gemm_fp8_params.h"
#include "moe/moe_params.h"
#include "ops/gemm/gemm_desc.hpp"
#include "ops/moe/moe.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {
using namespace def;

using cuda::kHopperSmemOptin;

// The models of issue 28: Mixtral 8x7B (8 experts, top 2, hidden 4096, gate_up n 28672),
// Qwen3-30B-A3B (128, top 8, hidden 2048, gate_up n 1536) and DeepSeek-V3 (256 in 8 groups, top
// 8 of the best 4 groups, hidden 7168, gate_up n 4096).
struct MoeModel {
  int64_t experts, top_k, n_group, hidden, gate_up_n;
  bool sigmoid;
};
constexpr MoeModel kMoeModels[] = {
    {8, 2, 1, 4096, 28672, false}, {128, 8, 1, 2048, 1536, false}, {256, 8, 8, 7168, 4096, true}};

std::string route_name(DType dtype, int64_t experts, int64_t top_k, int64_t n_group, bool sigmoid) {
  return fmt::format("moe_route_e{}_k{}{}_{}{}", experts, top_k,
                     n_group > 1 ? fmt::format("_g{}", n_group) : std::string(),
                     sigmoid ? "sigmoid" : "softmax", dtype_suffix(dtype));
}
std::string permute_name(DType dtype, int64_t hidden, int64_t experts, int64_t top_k) {
  return fmt::format("moe_permute_h{}_e{}_k{}{}", hidden, experts, top_k, dtype_suffix(dtype));
}
std::string finalize_name(DType dtype, int64_t hidden, int64_t top_k, bool shared) {
  return fmt::format("moe_finalize_h{}_k{}{}{}", hidden, top_k, shared ? "_shared" : "",
                     dtype_suffix(dtype));
}
std::string gemm_name(bool masked, DType dtype, DType out_dtype, int64_t experts, int64_t n,
                      int64_t k) {
  return fmt::format("moe_grouped_gemm{}_e{}_n{}_k{}{}{}", masked ? "_masked" : "", experts, n, k,
                     dtype_suffix(dtype),
                     out_dtype == dtype ? "" : std::string("_out_") + dtype_name(out_dtype));
}
std::string gemm_fp8_name(bool masked, DType out_dtype, int64_t experts, int64_t n, int64_t k) {
  return fmt::format("moe_grouped_gemm_fp8{}_e{}_n{}_k{}{}", masked ? "_masked" : "", experts, n, k,
                     dtype_suffix(out_dtype));
}

// One definition per model of kMoeModels.
template <class Make>
std::vector<Definition> per_model(Make make) {
  std::vector<Definition> out;
  for (const MoeModel& m : kMoeModels) out.push_back(make(m));
  return out;
}

// A row-copy kernel's vec from --set: at most one 16-byte access.
int vec_arg(const char* op, const SetArgs& args, DType dtype) {
  const int vec = std::stoi(args.at("vec"));
  if (vec * static_cast<int>(dtype_size(dtype)) > 16) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "{}: vec {} of {} exceeds 16 bytes", op, vec,
         args.at("dtype"));
  }
  return vec;
}

const std::vector<std::string> kFloatTypes = {"fp32", "fp16", "bf16"};
// The decode kernels' token tiles (moe_gemm_decode_sm90.cuh).
const std::vector<std::string> kDecodeTokens = {"16", "32", "64"};

// The decode kernel's token tiles a call of grouped GEMM definition `def` may take on an sm_90a
// device: with its rows var axis given (a workload line's rows or max_rows), the one the
// selection's host bound picks (none where the call takes the tile kernel); else every tile.
std::vector<std::string> decode_tiles(const Definition& def, const VarAxes& axes) {
  const bool masked = def.entry.find("masked") != std::string::npos;
  const std::optional<int64_t> given = var_axis(axes, masked ? "max_rows" : "rows");
  if (!given) return kDecodeTokens;
  const int64_t experts = def.const_axis("experts");
  const int64_t rows = masked ? *given * experts : *given;
  const int64_t bound = moe_decode_rows(masked, rows, *given, experts);
  if (bound == 0) return {};
  GemmTarget hopper;
  hopper.cc_major = 9;
  hopper.max_smem_optin = kHopperSmemOptin;
  hopper.tma_ok = true;
  // The narrowest tile that holds the bound (select_moe_gemm's and select_moe_gemm_fp8's: it
  // depends on neither n, k nor the blocks per SM, which set only the stages).
  const GemmDecodeTile t = gemm_decode_tile(hopper, bound, 1, 64, [](int) { return 2; });
  return {std::to_string(t.tokens)};
}
}  // namespace

Definition moe_route_definition(DType dtype, int64_t experts, int64_t top_k, int64_t n_group,
                                bool sigmoid) {
  Definition d;
  d.name = route_name(dtype, experts, top_k, n_group, sigmoid);
  d.op_type = "moe";
  d.op = "moe_route";
  d.entry = "kjit_moe_route";
  d.description = fmt::format(
      "{} scores, top {} experts{} (correction bias for selection only), weights from the "
      "unbiased scores, renormalized, times routed_scaling_factor",
      sigmoid ? "sigmoid" : "softmax", top_k,
      n_group > 1 ? " of the best groups (group score: sum of its top 2)" : "");
  d.axes = {var("tokens", "tokens routed"), constant("experts", experts, "routed experts"),
            constant("top_k", top_k, "experts per token")};
  d.inputs = {tensor("logits", {"tokens", "experts"}, dtype, "router logits"),
              tensor("bias", {"experts"}, DType::kF32, "correction bias (optional)")};
  d.outputs = {tensor("topk_ids", {"tokens", "top_k"}, DType::kI32, "experts, best first"),
               tensor("topk_weights", {"tokens", "top_k"}, DType::kF32, "their weights")};
  d.reference = "tools/devkit/reference/moe_ref.hpp: ref::moe_route_token";
  return d;
}

Definition moe_permute_definition(DType dtype, int64_t hidden, int64_t experts, int64_t top_k) {
  Definition d;
  d.name = permute_name(dtype, hidden, experts, top_k);
  d.op_type = "moe";
  d.op = "moe_permute";
  d.entry = "kjit_moe_permute";
  d.description =
      "tokens' rows sorted by expert (stable: token order within an expert), per-expert offsets "
      "and both index maps, on the device";
  d.axes = {var("tokens", "tokens routed"),
            constant("hidden", hidden, "row length"),
            constant("experts", experts, "routed experts"),
            constant("top_k", top_k, "experts per token"),
            var("pairs", "tokens * top_k: fixed by tokens"),
            var("experts_plus_one", "offsets' length: experts + 1, fixed by experts")};
  d.inputs = {tensor("x", {"tokens", "hidden"}, dtype, "activations"),
              tensor("topk_ids", {"tokens", "top_k"}, DType::kI32, "kjit_moe_route's ids")};
  d.outputs = {tensor("permuted", {"pairs", "hidden"}, dtype, "rows grouped by expert"),
               tensor("expert_offsets", {"experts_plus_one"}, DType::kI32, "expert e's rows"),
               tensor("permuted_to_src", {"pairs"}, DType::kI32, "pair of each permuted row"),
               tensor("src_to_permuted", {"tokens", "top_k"}, DType::kI32, "the inverse")};
  d.reference = "tools/devkit/reference/moe_ref.hpp: ref::moe_permute";
  return d;
}

Definition moe_finalize_definition(DType dtype, int64_t hidden, int64_t top_k, bool shared) {
  Definition d;
  d.name = finalize_name(dtype, hidden, top_k, shared);
  d.op_type = "moe";
  d.op = "moe_finalize";
  d.entry = "kjit_moe_finalize";
  d.description = std::string("out = sum over top k of weight * expert row, in fp32") +
                  (shared ? " + the shared expert's output" : "");
  d.axes = {var("tokens", "tokens routed"), constant("hidden", hidden, "row length"),
            constant("top_k", top_k, "experts per token"),
            var("pairs", "tokens * top_k: fixed by tokens")};
  d.inputs = {tensor("expert_out", {"pairs", "hidden"}, dtype, "experts' rows, permuted"),
              tensor("src_to_permuted", {"tokens", "top_k"}, DType::kI32, "kjit_moe_permute's"),
              tensor("topk_weights", {"tokens", "top_k"}, DType::kF32, "kjit_moe_route's")};
  if (shared) d.inputs.push_back(tensor("shared_out", {"tokens", "hidden"}, dtype, "added"));
  d.outputs = {tensor("out", {"tokens", "hidden"}, dtype, "the layer's output")};
  d.reference =
      "tools/devkit/reference/moe_ref.hpp: ref::moe_permute (the inverse map; the fp64 sum is "
      "check_finalize in tests/gpu/moe_gpu_test.cpp)";
  return d;
}

Definition moe_grouped_gemm_definition(bool masked, DType dtype, DType out_dtype, int64_t experts,
                                       int64_t n, int64_t k) {
  Definition d;
  d.name = gemm_name(masked, dtype, out_dtype, experts, n, k);
  d.op_type = "moe";
  d.op = "moe_grouped_gemm";
  d.entry = masked ? "kjit_moe_grouped_gemm_masked" : "kjit_moe_grouped_gemm";
  d.description = masked ? "out[e, :counts[e]] = a[e, :counts[e]] . b[e]^T, fp32 accumulation"
                         : "rows offsets[e] .. offsets[e + 1] of out = the same rows of a . "
                           "b[e]^T, fp32 accumulation";
  d.axes = {constant("experts", experts, "experts"), constant("n", n, "output features"),
            constant("k", k, "input features")};
  if (masked) {
    d.axes.push_back(var("max_rows", "rows per expert's slot"));
    d.inputs = {tensor("a", {"experts", "max_rows", "k"}, dtype, "activations per expert"),
                tensor("b", {"experts", "n", "k"}, dtype, "experts' weights"),
                tensor("counts", {"experts"}, DType::kI32, "rows used per expert")};
    d.outputs = {tensor("out", {"experts", "max_rows", "n"}, out_dtype, "the products")};
  } else {
    d.axes.push_back(var("rows", "permuted rows: tokens * top_k"));
    d.axes.push_back(var("experts_plus_one", "offsets' length: experts + 1, fixed by experts"));
    d.inputs = {tensor("a", {"rows", "k"}, dtype, "kjit_moe_permute's rows"),
                tensor("b", {"experts", "n", "k"}, dtype, "experts' weights"),
                tensor("expert_offsets", {"experts_plus_one"}, DType::kI32, "expert e's rows")};
    d.outputs = {tensor("out", {"rows", "n"}, out_dtype, "the products")};
  }
  d.reference = "tools/devkit/reference/gemm_ref.hpp: ref::gemm_element (per expert)";
  return d;
}

OpDef moe_route_op_def() {
  OpDef d;
  d.name = "moe_route";
  d.summary = "MoE routing: softmax / sigmoid scores, (grouped) top-k, weights [tokens, top_k]";
  d.axes = {{"dtype", kFloatTypes, true, "logits dtype"}};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    return moe_route_spec(MoeRouteConfig{dtype_from_name(args.at("dtype"))});
  };
  d.catalog = [] {
    std::vector<SetArgs> out;
    for (const auto& dt : kFloatTypes) out.push_back({{"dtype", dt}});
    return out;
  };
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    return std::vector<SetArgs>{{{"dtype", dtype_name(def.tensor_dtype("logits"))}}};
  };
  d.definitions = [] {
    return per_model([](const MoeModel& m) {
      return moe_route_definition(m.sigmoid ? DType::kF32 : DType::kBF16, m.experts, m.top_k,
                                  m.n_group, m.sigmoid);
    });
  };
  return d;
}

OpDef moe_permute_op_def() {
  OpDef d;
  d.name = "moe_permute";
  d.summary = "MoE permutation: rows sorted by expert, offsets and index maps (no host sync)";
  d.axes = {{"dtype", kFloatTypes, true, "x dtype"},
            {"vec", {"1", "2", "4", "8"}, true, "elements per row access"},
            {"buckets", {"32", "64", "128", "256", "512"}, true, "sort buckets (>= experts + 1)"}};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    MoePermuteConfig c;
    c.dtype = dtype_from_name(args.at("dtype"));
    c.vec = vec_arg("moe_permute", args, c.dtype);
    c.buckets = std::stoi(args.at("buckets"));
    return moe_permute_spec(c);
  };
  d.catalog = [] {
    std::vector<SetArgs> out;
    for (const MoeModel& m : kMoeModels) {
      const MoePermuteConfig c = select_moe_permute(DType::kBF16, m.experts, 16, m.hidden);
      out.push_back({{"dtype", "bf16"},
                     {"vec", std::to_string(c.vec)},
                     {"buckets", std::to_string(c.buckets)}});
    }
    return out;
  };
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    const MoePermuteConfig c = select_moe_permute(def.tensor_dtype("x"), def.const_axis("experts"),
                                                  16, def.const_axis("hidden"));
    return std::vector<SetArgs>{{{"dtype", dtype_name(c.dtype)},
                                 {"vec", std::to_string(c.vec)},
                                 {"buckets", std::to_string(c.buckets)}}};
  };
  d.definitions = [] {
    return per_model([](const MoeModel& m) {
      return moe_permute_definition(DType::kBF16, m.hidden, m.experts, m.top_k);
    });
  };
  return d;
}

OpDef moe_finalize_op_def() {
  OpDef d;
  d.name = "moe_finalize";
  d.summary = "MoE finalize: weighted sum over top-k of expert rows (+ shared expert), fp32";
  d.axes = {{"dtype", kFloatTypes, true, "expert_out / out dtype"},
            {"vec", {"1", "2", "4", "8"}, true, "elements per row access"}};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    const DType dtype = dtype_from_name(args.at("dtype"));
    const MoeFinalizeConfig c{dtype, vec_arg("moe_finalize", args, dtype)};
    return moe_finalize_spec(c);
  };
  d.catalog = [] {
    return std::vector<SetArgs>{{{"dtype", "bf16"}, {"vec", "8"}},
                                {{"dtype", "fp32"}, {"vec", "4"}}};
  };
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    const MoeFinalizeConfig c =
        select_moe_finalize(def.tensor_dtype("out"), 16, def.const_axis("hidden"));
    return std::vector<SetArgs>{{{"dtype", dtype_name(c.dtype)}, {"vec", std::to_string(c.vec)}}};
  };
  d.definitions = [] {
    return per_model([](const MoeModel& m) {
      return moe_finalize_definition(DType::kBF16, m.hidden, m.top_k, m.sigmoid);
    });
  };
  return d;
}

namespace {

// `sets` and, after them, each tile-kernel set of a 16-bit out again with tma_out: the form a
// TMA-ready out runs (moe_tma_out). A tile-kernel set: path sm90 (moe_grouped_gemm's sets), or no
// token tile (moe_grouped_gemm_fp8's, which have no path).
std::vector<SetArgs> with_staged_out(std::vector<SetArgs> sets) {
  const size_t n = sets.size();
  for (size_t i = 0; i < n; ++i) {
    const SetArgs& a = sets[i];
    const bool tiles = a.count("path") != 0 ? a.at("path") == "sm90" : a.count("tokens") == 0;
    if (!tiles || a.at("out_dtype") == "fp32") continue;
    SetArgs staged = a;
    staged["tma_out"] = "1";
    sets.push_back(std::move(staged));
  }
  return sets;
}

}  // namespace

OpDef moe_grouped_gemm_op_def() {
  OpDef d;
  d.name = "moe_grouped_gemm";
  d.summary = "grouped GEMM over experts (contiguous or masked rows), bf16/fp16 in";
  d.axes = {{"path",
             {"sm90", "decode", "simt"},
             true,
             "sm90: TMA + wgmma, 128-row tiles (sm_90a); decode: the weight-streaming kernel for "
             "few rows per expert (sm_90a); simt: any arch"},
            {"dtype", {"bf16", "fp16"}, true, "a and b dtype"},
            {"out_dtype", {"bf16", "fp16", "fp32"}, true, "out dtype"},
            {"bn", {"128", "256"}, false, "sm90: output tile width (default 128)"},
            {"tokens", kDecodeTokens, false, "decode: token tile (default 16)"},
            {"stages",
             {"2", "3", "4", "5", "6", "7", "8", "9"},
             false,
             "sm90 (2 .. 6) and decode: pipeline stages (default: the path's)"},
            {"swiglu",
             {"0", "1"},
             false,
             "sm90 and decode: silu(gate) * up in the epilogue, b = w13 [experts, 2 I, k] "
             "(default 0)"},
            {"persistent",
             {"0", "1"},
             false,
             "sm90: 1 = persistent blocks (min(items, SMs) blocks looping over the schedule's "
             "items; what calls on the tile path run), default 0"},
            {"pair",
             {"0", "1"},
             false,
             "sm90 persistent: 1 = clusters of two blocks on adjacent column tiles sharing a's "
             "rows (TMA multicast; MoeGemmTuning::pair), default 0"},
            {"tma_out",
             {"0", "1"},
             false,
             "sm90: 1 = the TMA-store epilogue on tiles whose rows are all their expert's (a "
             "bf16 / fp16 out; what a TMA-ready out runs), default 0"}};
  d.arch_families = {"sm_80+", "sm_90a"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    MoeGemmConfig c;
    const std::string& path = args.at("path");
    c.path = path == "sm90"     ? GemmPath::kSm90
             : path == "decode" ? GemmPath::kSm90Decode
                                : GemmPath::kSimt;
    c.dtype = dtype_from_name(args.at("dtype"));
    c.out_dtype = dtype_from_name(args.at("out_dtype"));
    const bool tiles =
        args.count("bn") != 0 || args.count("stages") != 0 || args.count("swiglu") != 0;
    const bool persistent = args.count("persistent") != 0 && args.at("persistent") == "1";
    if (persistent && c.path != GemmPath::kSm90) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "moe_grouped_gemm: persistent is an sm90 setting");
    }
    const bool pair = args.count("pair") != 0 && args.at("pair") == "1";
    if (pair && !persistent) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "moe_grouped_gemm: pair is a setting of the persistent sm90 kernel");
    }
    c.persistent = pair ? 2 : persistent ? 1 : 0;
    if (c.path != GemmPath::kSm90Decode && args.count("tokens") != 0) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "moe_grouped_gemm: tokens is a decode setting");
    }
    if (c.path != GemmPath::kSm90 && args.count("tma_out") != 0 && args.at("tma_out") == "1") {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "moe_grouped_gemm: tma_out is an sm90 setting");
    }
    if (c.path == GemmPath::kSimt) {
      if (tiles) {
        fail(KJIT_ERROR_INVALID_ARGUMENT,
             "moe_grouped_gemm: bn, stages and swiglu are sm90 settings");
      }
      return moe_gemm_spec(c);
    }
    c.swiglu = args.count("swiglu") != 0 && args.at("swiglu") == "1" ? 1 : 0;
    if (c.path == GemmPath::kSm90Decode) {
      if (args.count("bn") != 0)
        fail(KJIT_ERROR_INVALID_ARGUMENT, "moe_grouped_gemm: bn is sm90's");
      c.tokens = args.count("tokens") != 0 ? std::stoi(args.at("tokens")) : 16;
      c.stages = args.count("stages") != 0 ? std::stoi(args.at("stages"))
                                           : gemm_decode_stages(c.tokens, kHopperSmemOptin);
      return moe_gemm_spec(c);
    }
    c.bn = args.count("bn") != 0 ? std::stoi(args.at("bn")) : 128;
    c.stages = args.count("stages") != 0 ? std::stoi(args.at("stages")) : sm90_default_stages(c.bn);
    if (c.stages > 6) fail(KJIT_ERROR_INVALID_ARGUMENT, "moe_grouped_gemm: sm90 stages are 2 .. 6");
    c.tma_out = spec_tma_out("moe_grouped_gemm", args, c.out_dtype, c.bn, c.stages) ? 1 : 0;
    return moe_gemm_spec(c);
  };
  d.catalog = [] {
    std::vector<SetArgs> out;
    for (const char* dt : {"bf16", "fp16"}) {
      // The tile path's default, the persistent form (ops::moe_gemm_persistent), at both widths,
      // and (out in a's dtype) its pairs (MoeGemmTuning::pair).
      for (const char* od : {dt, "fp32"}) {
        for (const char* bn : {"128", "256"}) {
          out.push_back({{"path", "sm90"},
                         {"dtype", dt},
                         {"out_dtype", od},
                         {"bn", bn},
                         {"persistent", "1"}});
          if (od == std::string(dt)) {
            out.push_back(out.back());
            out.back()["pair"] = "1";
          }
        }
        out.push_back({{"path", "simt"}, {"dtype", dt}, {"out_dtype", od}});
      }
      // kjit_moe_forward's gate_up GEMM with silu_and_mul fused (out in a's dtype), persistent.
      for (const char* bn : {"128", "256"}) {
        out.push_back({{"path", "sm90"},
                       {"dtype", dt},
                       {"out_dtype", dt},
                       {"bn", bn},
                       {"swiglu", "1"},
                       {"persistent", "1"}});
      }

      // The decode kernel at every token tile, plain and (out in a's dtype) SwiGLU.
      for (const std::string& tokens : kDecodeTokens) {
        for (const char* od : {dt, "fp32"}) {
          out.push_back({{"path", "decode"}, {"dtype", dt}, {"out_dtype", od}, {"tokens", tokens}});
        }
        out.push_back({{"path", "decode"},
                       {"dtype", dt},
                       {"out_dtype", dt},
                       {"tokens", tokens},
                       {"swiglu", "1"}});
      }
    }
    // One block per item (the bench's path=sm90, the suite's -items rows), bf16.
    for (const char* bn : {"128", "256"}) {
      out.push_back({{"path", "sm90"}, {"dtype", "bf16"}, {"out_dtype", "bf16"}, {"bn", bn}});
    }
    return with_staged_out(std::move(out));
  };
  // The fallback and both tile widths of the wgmma path (the width follows the routing, a
  // run-time value), in the form the call runs (moe_gemm_persistent).
  d.precompile_sets = [](const Definition& def, const VarAxes& axes) {
    const SetArgs types = {{"dtype", dtype_name(def.tensor_dtype("a"))},
                           {"out_dtype", dtype_name(def.tensor_dtype("out"))}};
    std::vector<SetArgs> out = {types};
    out.back()["path"] = "simt";
    GemmTarget hopper;
    hopper.cc_major = 9;
    hopper.max_smem_optin = kHopperSmemOptin;
    hopper.tma_ok = true;
    const int64_t experts = def.const_axis("experts");
    // Decode, one row tile an expert (where the pairs may pay) and several.
    for (int64_t avg : {1, 128, 512}) {
      const int64_t n = def.const_axis("n"), k = def.const_axis("k");
      const MoeGemmConfig c = select_moe_gemm(def.tensor_dtype("a"), def.tensor_dtype("out"),
                                              avg * experts, avg, n, k, experts, hopper);
      SetArgs a = types;
      a["path"] = gemm_path_name(c.path);
      if (c.path == GemmPath::kSm90) {
        a["bn"] = std::to_string(c.bn);
        a["stages"] = std::to_string(c.stages);
        // The call's form of the tile kernel (the definitions are the plain GEMM's: no SwiGLU),
        // as the entry points tune it.
        MoeGemmConfig called = c;
        moe_gemm_tune(called, {}, avg, n, k);
        if (called.persistent != 0) a["persistent"] = "1";
        if (called.persistent == 2) a["pair"] = "1";
      }
      out.push_back(std::move(a));
    }
    out = with_staged_out(std::move(out));
    // The decode kernel's token tiles (the rows per expert pick one).
    for (const std::string& tokens : decode_tiles(def, axes)) {
      SetArgs a = types;
      a["path"] = "decode";
      a["tokens"] = tokens;
      out.push_back(std::move(a));
    }
    return out;
  };
  d.definitions = [] {
    std::vector<Definition> out = per_model([](const MoeModel& m) {
      return moe_grouped_gemm_definition(false, DType::kBF16, DType::kBF16, m.experts, m.gate_up_n,
                                         m.hidden);
    });
    const MoeModel& ds = kMoeModels[2];
    out.push_back(moe_grouped_gemm_definition(true, DType::kBF16, DType::kBF16, ds.experts,
                                              ds.gate_up_n, ds.hidden));
    return out;
  };
  return d;
}

Definition moe_grouped_gemm_fp8_definition(bool masked, DType out_dtype, int64_t experts, int64_t n,
                                           int64_t k) {
  Definition d;
  d.name = gemm_fp8_name(masked, out_dtype, experts, n, k);
  d.op_type = "moe";
  d.op = "moe_grouped_gemm_fp8";
  d.entry = masked ? "kjit_moe_grouped_gemm_fp8_masked" : "kjit_moe_grouped_gemm_fp8";
  d.description =
      "the grouped GEMM over e4m3 a and b with DeepSeek-V3 block scales (a per 1 x 128 group, "
      "b[e] per 128 x 128 block), each 128-wide K chunk promoted into fp32 times its scales";
  d.axes = {constant("experts", experts, "experts"), constant("n", n, "output features"),
            constant("k", k, "input features"), var("k_chunks", "ceil(k / 128): fixed by k"),
            var("n_blocks", "ceil(n / 128): fixed by n")};
  const DefTensor b = tensor("b", {"experts", "n", "k"}, DType::kE4M3, "experts' weights");
  const DefTensor scale_b = tensor("scale_b", {"experts", "n_blocks", "k_chunks"}, DType::kF32,
                                   "b's scale per 128 x 128 block");
  if (masked) {
    d.axes.push_back(var("max_rows", "rows per expert's slot"));
    d.inputs = {tensor("a", {"experts", "max_rows", "k"}, DType::kE4M3, "activations per expert"),
                b,
                tensor("scale_a", {"experts", "max_rows", "k_chunks"}, DType::kF32,
                       "a's scale per 1 x 128 group"),
                scale_b, tensor("counts", {"experts"}, DType::kI32, "rows used per expert")};
    d.outputs = {tensor("out", {"experts", "max_rows", "n"}, out_dtype, "the products")};
  } else {
    d.axes.push_back(var("rows", "permuted rows: tokens * top_k"));
    d.axes.push_back(var("experts_plus_one", "offsets' length: experts + 1, fixed by experts"));
    d.inputs = {tensor("a", {"rows", "k"}, DType::kE4M3, "kjit_moe_permute's rows, quantized"), b,
                tensor("scale_a", {"rows", "k_chunks"}, DType::kF32, "a's scale per 1 x 128 group"),
                scale_b,
                tensor("expert_offsets", {"experts_plus_one"}, DType::kI32, "expert e's rows")};
    d.outputs = {tensor("out", {"rows", "n"}, out_dtype, "the products")};
  }
  d.reference = "tools/devkit/reference/moe_ref.hpp: ref::moe_gemm_fp8_element (per expert)";
  return d;
}

OpDef moe_grouped_gemm_fp8_op_def() {
  OpDef d;
  d.name = "moe_grouped_gemm_fp8";
  d.summary = "fp8 block-scaled grouped GEMM over experts (contiguous or masked rows), sm_90a";
  d.axes = {{"out_dtype", {"bf16", "fp16", "fp32"}, true, "out dtype"},
            {"tokens", kDecodeTokens, false,
             "the decode kernel (weight streaming, few rows per expert) at this token tile; "
             "absent: 128-row tiles"},
            {"stages",
             {"2", "3", "4", "5", "6", "7", "8", "9"},
             false,
             "pipeline stages (default 6; decode: as many as fit its blocks per SM)"},
            {"swiglu",
             {"0", "1"},
             false,
             "silu(gate) * up in the epilogue, b = w13 [experts, 2 I, k] (default 0)"},
            {"persistent",
             {"0", "1"},
             false,
             "the 128-row tile kernel's persistent form (min(items, SMs) blocks looping over the "
             "schedule's items; what calls on the tile path run), default 0"},
            {"pair",
             {"0", "1"},
             false,
             "the persistent form in pairs: 1 = clusters of two blocks on adjacent column tiles "
             "sharing a's rows (TMA multicast; MoeGemmTuning::pair), default 0"},
            {"bn",
             {"128", "256"},
             false,
             "the tile kernel's width: 128 (default) or 256 (4 stages: ops::moe_fp8_wide_tile's "
             "choice from 256 rows an expert, or MoeGemmTuning::bn)"},
            {"tma_out",
             {"0", "1"},
             false,
             "the tile kernel: 1 = the TMA-store epilogue on tiles whose rows are all their "
             "expert's (a bf16 / fp16 out; the form a TMA-ready out runs), default 0"}};
  d.arch_families = {"sm_90a"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    MoeGemmFp8Config c;
    c.out_dtype = dtype_from_name(args.at("out_dtype"));
    c.tokens = args.count("tokens") != 0 ? std::stoi(args.at("tokens")) : 0;
    const int dflt = c.tokens != 0 ? gemm_decode_stages(c.tokens, kHopperSmemOptin,
                                                        moe::moe_fp8_decode_blocks_per_sm(c.tokens))
                                   : 6;
    c.bn = args.count("bn") != 0 ? std::stoi(args.at("bn")) : 128;
    if (c.bn != 128 && c.tokens != 0) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "moe_grouped_gemm_fp8: bn is the tile kernel's setting, not the decode kernel's");
    }
    c.stages = args.count("stages") != 0 ? std::stoi(args.at("stages"))
               : c.bn == 256             ? sm90_default_stages(256)
                                         : dflt;
    c.swiglu = args.count("swiglu") != 0 && args.at("swiglu") == "1" ? 1 : 0;
    c.persistent = args.count("persistent") != 0 && args.at("persistent") == "1" ? 1 : 0;
    if (args.count("pair") != 0 && args.at("pair") == "1") {
      if (c.persistent == 0) {
        fail(KJIT_ERROR_INVALID_ARGUMENT,
             "moe_grouped_gemm_fp8: pair is a setting of the persistent tile kernel");
      }
      c.persistent = 2;
    }
    if (c.persistent != 0 && c.tokens != 0) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "moe_grouped_gemm_fp8: persistent is the 128-row tile kernel's setting, not the "
           "decode kernel's (tokens)");
    }
    if (c.tokens != 0 && args.count("tma_out") != 0 && args.at("tma_out") == "1") {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "moe_grouped_gemm_fp8: tma_out is the tile kernel's setting, not the decode kernel's");
    }
    c.tma_out = spec_tma_out("moe_grouped_gemm_fp8", args, c.out_dtype, c.bn, c.stages) ? 1 : 0;
    return moe_gemm_fp8_spec(c);
  };
  // bf16 out for the entry points (one block per item, the -items rows, and the persistent
  // default); the SwiGLU form, persistent, in both 16-bit dtypes for the layer's gate_up; each
  // tile set again with the TMA-store epilogue (with_staged_out); the decode kernel at every
  // token tile, plain and SwiGLU.
  d.catalog = [] {
    std::vector<SetArgs> out = {
        {{"out_dtype", "bf16"}},
        {{"out_dtype", "bf16"}, {"swiglu", "1"}, {"persistent", "1"}},
        {{"out_dtype", "fp16"}, {"swiglu", "1"}, {"persistent", "1"}},
        // the tile path's default (moe_gemm_persistent)
        {{"out_dtype", "bf16"}, {"persistent", "1"}},
        // the 256-wide tile (moe_fp8_wide_tile's), plain and SwiGLU
        {{"out_dtype", "bf16"}, {"persistent", "1"}, {"bn", "256"}},
        // the default's pairs (MoeGemmTuning::pair) at both widths
        {{"out_dtype", "bf16"}, {"persistent", "1"}, {"pair", "1"}},
        {{"out_dtype", "bf16"}, {"persistent", "1"}, {"pair", "1"}, {"bn", "256"}},
        {{"out_dtype", "bf16"}, {"swiglu", "1"}, {"persistent", "1"}, {"bn", "256"}},
        {{"out_dtype", "fp16"}, {"swiglu", "1"}, {"persistent", "1"}, {"bn", "256"}}};
    out = with_staged_out(std::move(out));
    for (const std::string& tokens : kDecodeTokens) {
      out.push_back({{"out_dtype", "bf16"}, {"tokens", tokens}});
      out.push_back({{"out_dtype", "bf16"}, {"tokens", tokens}, {"swiglu", "1"}});
      out.push_back({{"out_dtype", "fp16"}, {"tokens", tokens}, {"swiglu", "1"}});
    }
    return out;
  };
  d.precompile_sets = [](const Definition& def, const VarAxes& axes) {
    const std::string od = dtype_name(def.tensor_dtype("out"));
    // The tile kernel in the call's form at both widths (the width follows the routing, a run-time
    // value; the definitions are the plain GEMM's: no SwiGLU).
    std::vector<SetArgs> out;
    for (const char* bn : {"128", "256"}) {
      out.push_back({{"out_dtype", od}, {"bn", bn}});
      if (moe_gemm_persistent({}, true) != 0) out.back()["persistent"] = "1";
    }
    // One row tile an expert (128 rows: the 128-wide tile, moe_fp8_wide_tile) where pairs pay.
    if (moe_gemm_persistent(
            {}, true, moe_pairs_pay(128, def.const_axis("n"), def.const_axis("k"), 128)) == 2) {
      out.push_back({{"out_dtype", od}, {"bn", "128"}, {"persistent", "1"}, {"pair", "1"}});
    }
    out = with_staged_out(std::move(out));
    for (const std::string& tokens : decode_tiles(def, axes)) {
      out.push_back({{"out_dtype", od}, {"tokens", tokens}});
    }
    return out;
  };
  d.definitions = [] {
    std::vector<Definition> out;
    for (const MoeModel& m : {kMoeModels[1], kMoeModels[2]}) {
      out.push_back(
          moe_grouped_gemm_fp8_definition(false, DType::kBF16, m.experts, m.gate_up_n, m.hidden));
    }
    const MoeModel& ds = kMoeModels[2];
    out.push_back(
        moe_grouped_gemm_fp8_definition(true, DType::kBF16, ds.experts, ds.gate_up_n, ds.hidden));
    return out;
  };
  return d;
}

namespace trace {

void moe_route(DType dtype, int64_t tokens, int64_t experts, int64_t top_k,
               const kjit_moe_route_options& o) noexcept {
  const bool sigmoid = o.scoring == KJIT_MOE_SCORING_SIGMOID;
  record(route_name(dtype, experts, top_k, o.n_group, sigmoid), {{"tokens", tokens}}, nullptr, {},
         [&] { return moe_route_definition(dtype, experts, top_k, o.n_group, sigmoid); });
}

void moe_permute(DType dtype, int64_t tokens, int64_t hidden, int64_t experts,
                 int64_t top_k) noexcept {
  record(permute_name(dtype, hidden, experts, top_k),
         {{"tokens", tokens}, {"pairs", tokens * top_k}, {"experts_plus_one", experts + 1}},
         nullptr, {}, [&] { return moe_permute_definition(dtype, hidden, experts, top_k); });
}

void moe_finalize(DType dtype, int64_t tokens, int64_t hidden, int64_t top_k,
                  bool shared) noexcept {
  record(finalize_name(dtype, hidden, top_k, shared),
         {{"tokens", tokens}, {"pairs", tokens * top_k}}, nullptr, {},
         [&] { return moe_finalize_definition(dtype, hidden, top_k, shared); });
}

void moe_grouped_gemm(const char* layout, DType dtype, DType out_dtype, int64_t rows, int64_t n,
                      int64_t k, int64_t experts) noexcept {
  const bool masked = std::string(layout) == "masked";
  nlohmann::ordered_json axes = {{masked ? "max_rows" : "rows", masked ? rows / experts : rows}};
  if (!masked) axes["experts_plus_one"] = experts + 1;
  record(gemm_name(masked, dtype, out_dtype, experts, n, k), axes, nullptr, {},
         [&] { return moe_grouped_gemm_definition(masked, dtype, out_dtype, experts, n, k); });
}

void moe_grouped_gemm_fp8(bool masked, DType out_dtype, int64_t rows, int64_t n, int64_t k,
                          int64_t experts) noexcept {
  nlohmann::ordered_json axes = {{masked ? "max_rows" : "rows", masked ? rows / experts : rows}};
  if (!masked) axes["experts_plus_one"] = experts + 1;
  axes["k_chunks"] = (k + gemm::kFp8ChunkK - 1) / gemm::kFp8ChunkK;
  axes["n_blocks"] = (n + gemm::kFp8ChunkK - 1) / gemm::kFp8ChunkK;
  record(gemm_fp8_name(masked, out_dtype, experts, n, k), axes, nullptr, {},
         [&] { return moe_grouped_gemm_fp8_definition(masked, out_dtype, experts, n, k); });
}

}  // namespace trace

}  // namespace kjit::ops
