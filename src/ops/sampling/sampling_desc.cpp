// See sampling_desc.hpp.
#include "ops/sampling/sampling_desc.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "diag/trace_dump.hpp"
#include "ops/sampling/sampling.hpp"
#include "ops/sampling/speculative.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using namespace def;
using ojson = nlohmann::ordered_json;

// --set align=16 (default) takes the vector path when the vocabulary allows it.
bool vec_ok_arg(const SetArgs& args, DType dtype, int64_t vocab) {
  const int align = args.count("align") ? std::stoi(args.at("align")) : 16;
  return align >= 16 && vocab % static_cast<int64_t>(16 / dtype_size(dtype)) == 0;
}

// A row op's --set values for a definition: its input's dtype and its vocabulary (16-byte aligned
// rows).
SetArgs row_set(const Definition& def) {
  const char* input = def.op_type == "argmax" ? "input" : "logits";
  return {{"dtype", dtype_name(def.tensor_dtype(input))},
          {"vocab", std::to_string(def.const_axis("vocab_size"))}};
}

AxisDef align_axis() {
  return {"align",
          {"16", "8", "4", "2", "1"},
          false,
          "byte alignment of the rows (default 16); below 16 takes the scalar path"};
}

AxisDef vocab_axis() {
  return {"vocab",
          {},
          false,
          "row length (default 128256); a run-time value, only its parity "
          "with the vector width matters"};
}

// Every dtype at 16-byte alignment (the vector path) and at 4 (the scalar path).
std::vector<SetArgs> row_catalog() {
  std::vector<SetArgs> out;
  for (const char* align : {"16", "4"}) {
    for (const char* dt : {"fp32", "bf16", "fp16"}) {
      out.push_back({{"dtype", dt}, {"align", align}});
    }
  }
  return out;
}

OpDef row_op_def(const char* name, const char* summary, jit::Spec (*spec)(const RowConfig&),
                 RowConfig (*select)(DType, int64_t, bool)) {
  OpDef d;
  d.name = name;
  d.summary = summary;
  d.axes = {{"dtype", {"fp32", "bf16", "fp16"}, true, "input dtype"}, align_axis(), vocab_axis()};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d, spec, select](const SetArgs& args) {
    check_set_args(d, args);
    const DType dtype = dtype_from_name(args.at("dtype"));
    const int64_t vocab =
        args.count("vocab") ? positive_int_arg(args, "vocab", kRowKernelMaxVocab) : 128256;
    return spec(select(dtype, vocab, vec_ok_arg(args, dtype, vocab)));
  };
  d.catalog = row_catalog;
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    return std::vector<SetArgs>{row_set(def)};
  };
  return d;
}

// The realistic definitions of these kinds: each at the vocabularies below, fp32.
std::vector<Definition> sampling_definitions(std::initializer_list<SamplingKind> kinds) {
  std::vector<Definition> out;
  for (SamplingKind k : kinds) {
    for (int v : {128256, 151936, 32000}) out.push_back(sampling_definition(k, DType::kF32, v));
  }
  return out;
}

// A row op with a `cluster` axis (blocks per row; > 1 a sm_90 thread-block cluster): its axis,
// the config of a --set (the select function's, with cluster and, where the op has the axis,
// unroll applied), the warm-up sets (one block a row and each cluster size the plan may give a
// row of the definition's vocabulary on sm_90: `most`) and the catalog's cluster entries (the
// usual logits dtypes at 16-byte alignment).
AxisDef cluster_axis(const char* values_note) {
  return {"cluster", {"1", "2", "4", "8"}, false, values_note};
}

RowConfig cluster_row_config(const SetArgs& args, RowConfig (*select)(DType, int64_t, bool)) {
  const DType dtype = dtype_from_name(args.at("dtype"));
  const int64_t vocab =
      args.count("vocab") ? positive_int_arg(args, "vocab", kRowKernelMaxVocab) : 128256;
  RowConfig c = select(dtype, vocab, vec_ok_arg(args, dtype, vocab));
  if (args.count("cluster")) c.cluster = static_cast<int>(positive_int_arg(args, "cluster", 8));
  if (args.count("unroll")) c.unroll = static_cast<int>(positive_int_arg(args, "unroll", 8));
  return c;
}

std::vector<SetArgs> cluster_precompile_sets(const Definition& def, int most) {
  std::vector<SetArgs> out = {row_set(def)};
  for (int c = 2; c <= most; c *= 2) {
    out.push_back(row_set(def));
    out.back()["cluster"] = std::to_string(c);
  }
  return out;
}

void add_cluster_catalog(std::vector<SetArgs>& out, std::initializer_list<const char*> sizes) {
  for (const char* dt : {"fp32", "bf16"}) {
    for (const char* c : sizes) {
      out.push_back({{"dtype", dt}, {"align", "16"}, {"cluster", c}});
    }
  }
}

}  // namespace

bool sampling_reads_logits(SamplingKind kind) {
  return kind == SamplingKind::kTopKTopPFromLogits || kind == SamplingKind::kTopKMaskLogits ||
         kind == SamplingKind::kSoftmax || kind == SamplingKind::kArgmax;
}

SamplingKind sample_kind(bool logits, int filters) {
  if (logits) return SamplingKind::kTopKTopPFromLogits;
  switch (filters) {
    case 0: return SamplingKind::kFromProbs;
    case 1: return SamplingKind::kTopKFromProbs;
    case 2: return SamplingKind::kTopPFromProbs;
    case 4: return SamplingKind::kMinPFromProbs;
    default: return SamplingKind::kTopKTopPFromProbs;  // 1 | 2, the only other one kjit.h has
  }
}

Definition sampling_definition(SamplingKind kind, DType dtype, int64_t vocab) {
  using K = SamplingKind;
  const bool logits = sampling_reads_logits(kind);
  const DType in_dtype = logits ? dtype : DType::kF32;
  Definition d;
  switch (kind) {
    case K::kFromProbs: d.op_type = "sampling_from_probs"; break;
    case K::kTopKFromProbs: d.op_type = "top_k_sampling_from_probs"; break;
    case K::kTopPFromProbs: d.op_type = "top_p_sampling_from_probs"; break;
    case K::kMinPFromProbs: d.op_type = "min_p_sampling_from_probs"; break;
    case K::kTopKTopPFromProbs: d.op_type = "top_k_top_p_sampling_from_probs"; break;
    case K::kTopKTopPFromLogits: d.op_type = "top_k_top_p_sampling_from_logits"; break;
    case K::kTopKRenormProbs: d.op_type = "top_k_renorm_probs"; break;
    case K::kTopPRenormProbs: d.op_type = "top_p_renorm_probs"; break;
    case K::kTopKMaskLogits: d.op_type = "top_k_mask_logits"; break;
    case K::kSoftmax: d.op_type = "softmax"; break;
    case K::kArgmax: d.op_type = "argmax"; break;
  }
  // Probabilities are always fp32, so only a logits dtype is a choice worth naming.
  d.name = fmt::format("{}_v{}{}", d.op_type, vocab, logits ? dtype_suffix(dtype) : "");
  d.op = kind == K::kSoftmax ? "softmax" : kind == K::kArgmax ? "argmax" : "sampling_filter";
  d.entry = "kjit_" + d.op_type;
  d.axes = {var("batch_size", "rows"), constant("vocab_size", vocab, "row length")};
  const char* in_name = kind == K::kArgmax ? "input" : logits ? "logits" : "probs";
  d.inputs = {tensor(in_name, {"batch_size", "vocab_size"}, in_dtype,
                     logits ? "logits" : "probabilities; need not be normalized")};
  const bool top_k = kind == K::kTopKFromProbs || kind == K::kTopKTopPFromProbs ||
                     kind == K::kTopKTopPFromLogits || kind == K::kTopKRenormProbs ||
                     kind == K::kTopKMaskLogits;
  const bool top_p = kind == K::kTopPFromProbs || kind == K::kTopKTopPFromProbs ||
                     kind == K::kTopKTopPFromLogits || kind == K::kTopPRenormProbs;
  const bool min_p = kind == K::kMinPFromProbs;
  const bool temperature = kind == K::kTopKTopPFromLogits || kind == K::kSoftmax;
  const bool draws = kind <= K::kTopKTopPFromLogits;
  if (top_k) {
    d.inputs.push_back(tensor("top_k", {"batch_size"}, DType::kI32,
                              "top_k_arr (int32 or int64; a row's k <= 0 or >= vocab_size: "
                              "off), or options->top_k (>= 1) for every row"));
  }
  if (top_p) {
    d.inputs.push_back(tensor("top_p", {"batch_size"}, DType::kF32,
                              "top_p_arr (a row's p >= 1: off), or options->top_p in (0, 1] "
                              "for every row"));
  }
  if (min_p) {
    d.inputs.push_back(tensor("min_p", {"batch_size"}, DType::kF32,
                              "min_p_arr (a row's min_p <= 0: off), or options->min_p in "
                              "[0, 1] for every row"));
  }
  if (temperature) {
    d.inputs.push_back(tensor("temperature", {"batch_size"}, DType::kF32,
                              kind == K::kSoftmax
                                  ? "temperature_arr, or options->temperature for every row"
                                  : "temperature_arr, or options->temperature for every row; "
                                    "0: greedy"));
  }
  if (draws) {
    d.inputs.push_back(tensor("seed", {"batch_size"}, DType::kI64,
                              "Philox key (int64 or uint64): one element for every row, or one "
                              "per row"));
    d.inputs.push_back(tensor("offset", {"batch_size"}, DType::kI64,
                              "Philox counter (int64 or uint64): one element, or one per row"));
    d.outputs = {tensor("samples", {"batch_size"}, DType::kI64,
                        "the drawn token (int64 or int32); -1 for an invalid row"),
                 {"valid",
                  {"batch_size"},
                  false,
                  "bool",
                  "optional (uint8 or bool): 1 where the row was sampled"}};
  } else if (kind == K::kArgmax) {
    d.outputs = {tensor("out", {"batch_size"}, DType::kI64,
                        "index of the first maximum, NaN the largest (int64 or int32)")};
  } else {
    const DType out_dtype = kind == K::kTopKMaskLogits ? in_dtype : DType::kF32;
    d.outputs = {tensor("out", {"batch_size", "vocab_size"}, out_dtype,
                        kind == K::kSoftmax ? "probabilities; may be logits when that is fp32"
                        : kind == K::kTopKMaskLogits ? "logits inside the set, -inf outside; "
                                                       "may be logits"
                                                     : "probs / (mass of the set) inside it, 0 "
                                                       "outside; may be probs")};
  }

  const char* set = kind == K::kFromProbs            ? "every token"
                    : kind == K::kTopKFromProbs      ? "the top-k set (ties at the k-th kept)"
                    : kind == K::kTopPFromProbs      ? "the top-p set"
                    : kind == K::kMinPFromProbs      ? "the min-p set (p >= min_p * max p)"
                    : kind == K::kTopKTopPFromProbs  ? "the top-p set within the top-k set"
                    : kind == K::kTopKTopPFromLogits ? "the top-p set within the top-k set of "
                                                       "softmax(logits / temperature)"
                    : kind == K::kTopKRenormProbs || kind == K::kTopKMaskLogits
                        ? "the top-k set (ties at the k-th kept)"
                        : "the top-p set";
  if (draws) {
    d.description = fmt::format(
        "draws one token per row from {}, in proportion to its weight (Philox4x32-10 keyed by "
        "seed, counter (offset, row, 0)); no sort of the vocabulary",
        set);
  } else if (kind == K::kSoftmax) {
    d.description = "out = softmax(logits / temperature) per row, in fp32";
  } else if (kind == K::kArgmax) {
    d.description = "out = index of the largest element of each row (the first on ties)";
  } else if (kind == K::kTopKMaskLogits) {
    d.description = fmt::format("keeps the logits of {} and sets the others to -inf", set);
  } else {
    d.description = fmt::format("renormalizes each row over {}", set);
  }
  d.reference =
      kind == K::kSoftmax  ? "tools/devkit/reference/sampling_ref.hpp: ref::softmax"
      : kind == K::kArgmax ? "tools/devkit/reference/sampling_ref.hpp: ref::argmax"
      : kind == K::kTopKTopPFromLogits
          ? "tools/devkit/reference/sampling_ref.hpp: ref::softmax, ref::keep_sets, "
            "ref::sampling_uniform, ref::inverse_cdf"
      : draws ? "tools/devkit/reference/sampling_ref.hpp: ref::keep_sets, ref::sampling_uniform, "
                "ref::inverse_cdf"
      : kind == K::kTopKMaskLogits
          ? "tools/devkit/reference/sampling_ref.hpp: ref::keep_sets (on the logits)"
          : "tools/devkit/reference/sampling_ref.hpp: ref::keep_sets, ref::target_distribution";
  return d;
}

OpDef sampling_filter_op_def() {
  OpDef d;
  d.name = "sampling_filter";
  d.summary = "sorting-free top-k / top-p / min-p: sample, renormalize probs, or mask logits";
  d.axes = {{"op", {"sample", "renorm", "mask"}, true, "what the kept set is used for"},
            {"input",
             {"probs", "logits"},
             false,
             "sample: probs (fp32) or logits (default probs); renorm: probs; mask: logits"},
            {"dtype", {"fp32", "bf16", "fp16"}, true, "input dtype (probabilities: fp32)"},
            align_axis(),
            vocab_axis(),
            {"path",
             {"single", "cluster"},
             false,
             "sample: one block per row (default) or a cluster of blocks per row (sm_90+)"},
            {"mass",
             {"bounds", "exact"},
             false,
             "sample: top-p on counts and mass bounds (the plan's for rows that may have a "
             "top-k) or on exact significand sums (the plan's for the others; no top-k)"}};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    const std::string& op_s = args.at("op");
    const FilterOp op = op_s == "sample"   ? FilterOp::kSample
                        : op_s == "renorm" ? FilterOp::kRenorm
                                           : FilterOp::kMask;
    const std::string in_s = args.count("input") ? args.at("input") : "";
    FilterInput input = in_s == "logits" ? FilterInput::kLogits : FilterInput::kProbs;
    if (op == FilterOp::kMask) {
      if (in_s == "probs") fail(KJIT_ERROR_UNSUPPORTED, "mask works on logits");
      input = FilterInput::kLogitKeys;
    }
    const DType dtype = dtype_from_name(args.at("dtype"));
    const int64_t vocab =
        args.count("vocab") ? positive_int_arg(args, "vocab", kFilterMaxVocab) : 128256;
    FilterConfig c = select_filter(op, input, dtype, vocab, vec_ok_arg(args, dtype, vocab));
    if (args.count("path") && args.at("path") == "cluster") {
      if (op != FilterOp::kSample) {
        fail(KJIT_ERROR_UNSUPPORTED, "the cluster path is for op=sample only");
      }
      c.cluster = 1;
    }
    if (args.count("mass") && args.at("mass") == "exact") {
      if (op != FilterOp::kSample) {
        fail(KJIT_ERROR_UNSUPPORTED, "the exact-mass search is for op=sample only");
      }
      c.mass = 1;
    }
    return filter_spec(c);
  };
  d.catalog = [] {
    // The vocabulary is a launch-time value, so a handful of variants serve every model: each
    // input kind and dtype with vector loads (four elements), and the scalar path for odd
    // vocabularies. Every
    // sampler comes twice, as the plan launches both: the exact-mass search (rows without a
    // top-k) and the counting one (rows that may have one).
    std::vector<SetArgs> out;
    auto sample = [&out](SetArgs args) {
      args["op"] = "sample";
      out.push_back(args);
      args["mass"] = "exact";
      out.push_back(args);
    };
    for (const char* align : {"16", "4"}) {
      sample({{"input", "probs"}, {"dtype", "fp32"}, {"align", align}});
      for (const char* dt : {"fp32", "bf16", "fp16"}) {
        sample({{"input", "logits"}, {"dtype", dt}, {"align", align}});
        out.push_back({{"op", "mask"}, {"dtype", dt}, {"align", align}});
      }
      out.push_back({{"op", "renorm"}, {"dtype", "fp32"}, {"align", align}});
    }
    // The small-batch samplers of sm_90+ (compiled for sm_90 and later targets only). Only
    // the 16-byte path: the scalar one (odd vocabularies) is rare enough to compile on demand.
    sample({{"input", "probs"}, {"dtype", "fp32"}, {"align", "16"}, {"path", "cluster"}});
    for (const char* dt : {"fp32", "bf16", "fp16"}) {
      sample({{"input", "logits"}, {"dtype", dt}, {"align", "16"}, {"path", "cluster"}});
    }
    return out;
  };
  // By the definition's op type. A sampler with a top-k may get both searches (the plan's counting
  // one for rows with a top-k, the exact one when no row has one), one without gets the exact
  // one; and each sampler its sm_90 cluster variant for small batches where the vocabulary is
  // long enough to split (the batch that takes it depends on the device's SM count).
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    const std::string& t = def.op_type;
    const bool logits = t == "top_k_top_p_sampling_from_logits" || t == "top_k_mask_logits";
    SetArgs base = {{"dtype", logits ? dtype_name(def.tensor_dtype("logits")) : "fp32"},
                    {"vocab", std::to_string(def.const_axis("vocab_size"))}};
    if (t == "top_k_renorm_probs" || t == "top_p_renorm_probs") {
      base["op"] = "renorm";
      return std::vector<SetArgs>{base};
    }
    if (t == "top_k_mask_logits") {
      base["op"] = "mask";
      return std::vector<SetArgs>{base};
    }
    if (t.find("sampling_from_") == std::string::npos) {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "definition {}: op type {} is no sampling filter", def.name,
           t);
    }
    base["op"] = "sample";
    base["input"] = logits ? "logits" : "probs";
    std::vector<SetArgs> out;
    const bool top_k = t.find("top_k") != std::string::npos;
    std::vector<const char*> paths = {"single"};
    if (def.const_axis("vocab_size") >= kSampleClusterMinVocab) paths.push_back("cluster");
    for (const char* path : paths) {
      for (const char* mass : {"bounds", "exact"}) {
        if (std::string(mass) == "bounds" && !top_k) continue;
        out.push_back(base);
        if (std::string(path) == "cluster") out.back()["path"] = "cluster";
        if (std::string(mass) == "exact") out.back()["mass"] = "exact";
      }
    }
    return out;
  };
  d.definitions = [] {
    // Llama 3 (128256), Qwen 2 / 2.5 (151936), Llama 2 / Mistral (32000). Engines upcast the
    // logits to fp32 before sampling, so the logits definitions are fp32.
    return sampling_definitions({SamplingKind::kFromProbs, SamplingKind::kTopKFromProbs,
                                 SamplingKind::kTopPFromProbs, SamplingKind::kMinPFromProbs,
                                 SamplingKind::kTopKTopPFromProbs,
                                 SamplingKind::kTopKTopPFromLogits, SamplingKind::kTopKRenormProbs,
                                 SamplingKind::kTopPRenormProbs, SamplingKind::kTopKMaskLogits});
  };
  return d;
}

OpDef softmax_op_def() {
  OpDef d = row_op_def("softmax", "softmax(x / T) over the last dim, fp32 out", softmax_spec,
                       select_softmax);
  d.axes.push_back(cluster_axis(
      "blocks per row (default 1); > 1 is a sm_90+ thread-block cluster, which batches that "
      "leave SMs idle get"));
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    return softmax_spec(cluster_row_config(args, select_softmax));
  };
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    return cluster_precompile_sets(
        def, softmax_cluster_size(1, def.const_axis("vocab_size"), 1 << 20, 9));
  };
  d.catalog = [] {
    std::vector<SetArgs> out = row_catalog();
    // Batches up to SMs / 8 rows on sm_90 (clusters of 2 and 4 compile on first use: the three
    // sampling catalogs share a budget).
    add_cluster_catalog(out, {"8"});
    return out;
  };
  d.definitions = [] {
    // Llama 3 (128256), Qwen 2 / 2.5 (151936), Llama 2 / Mistral (32000). Engines upcast the
    // logits to fp32 before sampling, so the logits definitions are fp32.
    return sampling_definitions({SamplingKind::kSoftmax});
  };
  return d;
}

OpDef argmax_op_def() {
  OpDef d = row_op_def("argmax", "index of the row maximum (first on ties, NaN largest)",
                       argmax_spec, select_argmax);
  d.axes.push_back(cluster_axis(
      "blocks per row (default 1); > 1 is a sm_90+ thread-block cluster, which small batches "
      "get"));
  d.axes.push_back({"unroll",
                    {"1", "2", "4", "8"},
                    false,
                    "vector loads in flight per lane (default: the plan's)"});
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    return argmax_spec(cluster_row_config(args, select_argmax));
  };
  // One block a row, and each cluster size the plan may give a row of this vocabulary on sm_90
  // (which one depends on the batch and the device's SM count).
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    return cluster_precompile_sets(
        def,
        argmax_cluster_size(ArgmaxPath::kAuto, 0, 1, def.const_axis("vocab_size"), 1 << 20, 9));
  };
  d.catalog = [] {
    std::vector<SetArgs> out = row_catalog();
    // Batches below 4 * SMs rows on sm_90 (on 132 SMs: clusters of 8 up to 66 rows, of 4 up to
    // 132, of 2 up to 264), for the usual logits dtypes; fp16 compiles on first use (the three
    // sampling catalogs share a budget of 40).
    add_cluster_catalog(out, {"8", "4", "2"});
    return out;
  };
  d.definitions = [] {
    // Llama 3 (128256), Qwen 2 / 2.5 (151936), Llama 2 / Mistral (32000). Engines upcast the
    // logits to fp32 before sampling, so the logits definitions are fp32.
    return sampling_definitions({SamplingKind::kArgmax});
  };
  return d;
}

Definition chain_speculative_definition(int64_t vocab, int64_t num_draft) {
  Definition d;
  d.op_type = "chain_speculative_sampling";
  d.name = fmt::format("chain_speculative_sampling_v{}_n{}", vocab, num_draft);
  d.op = "chain_speculative_sampling";
  d.entry = "kjit_chain_speculative_sampling";
  d.description =
      "keeps each request's draft tokens up to the first rejected one (accepted when u * q < p), "
      "then draws one token from max(0, p - q) there, or from the bonus step's p";
  d.axes = {var("batch_size", "requests"), constant("vocab_size", vocab, "row length"),
            constant("num_draft", num_draft, "draft tokens per request"),
            constant("num_steps", num_draft + 1, "target steps per request")};
  d.inputs = {
      tensor("draft_probs", {"batch_size", "num_draft", "vocab_size"}, DType::kF32,
             "the draft model's distributions"),
      tensor("draft_token_ids", {"batch_size", "num_draft"}, DType::kI32, "the draft tokens"),
      tensor("target_probs", {"batch_size", "num_steps", "vocab_size"}, DType::kF32,
             "the target model's distributions, one more step"),
      tensor("seed", {"batch_size"}, DType::kI64, "Philox key (1 or batch_size elements)"),
      tensor("offset", {"batch_size"}, DType::kI64, "Philox counter (1 or batch_size elements)")};
  d.outputs = {tensor("output_token_ids", {"batch_size", "num_steps"}, DType::kI32,
                      "kept draft tokens, the drawn token, then -1"),
               tensor("accepted", {"batch_size"}, DType::kI32,
                      "draft tokens accepted each on its own (optional)"),
               tensor("emitted", {"batch_size"}, DType::kI32, "draft tokens kept (optional)")};
  d.reference = "tools/devkit/reference/sampling_ref.hpp: ref::chain_speculative";
  return d;
}

OpDef chain_speculative_op_def() {
  OpDef d;
  d.name = "chain_speculative_sampling";
  d.summary = "chain speculative sampling: accept / reject draft tokens, draw the next token";
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    return chain_speculative_spec(SpeculativeConfig{});
  };
  d.catalog = [] { return std::vector<SetArgs>{SetArgs{}}; };
  d.precompile_sets = [](const Definition&, const VarAxes&) {
    return std::vector<SetArgs>{SetArgs{}};
  };
  d.definitions = [] {
    // Llama 3 (128256) with 4 draft tokens (EAGLE-style chains), Qwen 2.5 (151936) with 8.
    return std::vector<Definition>{chain_speculative_definition(128256, 4),
                                   chain_speculative_definition(151936, 8)};
  };
  return d;
}

namespace trace {

void chain_speculative(int64_t vocab, int64_t num_draft, int64_t batch) noexcept {
  const Definition d = chain_speculative_definition(vocab, num_draft);
  record(d.name, {{"batch_size", batch}}, nullptr, ojson::object(), [&] { return d; });
}

void sampling(SamplingKind kind, DType dtype, int64_t vocab, int64_t batch) noexcept {
  const Definition d = sampling_definition(kind, dtype, vocab);
  // The sampling benches time these at their default filter parameters; kjit_sampling_from_probs
  // (no filter) has no bench.
  const char* bench_op = nullptr;
  ojson set = {{"batch", std::to_string(batch)}, {"vocab", std::to_string(vocab)}};
  switch (kind) {
    case SamplingKind::kTopKFromProbs: bench_op = "top_k_sampling"; break;
    case SamplingKind::kTopPFromProbs: bench_op = "top_p_sampling"; break;
    case SamplingKind::kMinPFromProbs: bench_op = "min_p_sampling"; break;
    case SamplingKind::kTopKTopPFromProbs: bench_op = "top_k_top_p_sampling_probs"; break;
    case SamplingKind::kTopKTopPFromLogits: bench_op = "top_k_top_p_sampling"; break;
    case SamplingKind::kTopKRenormProbs: bench_op = "top_k_renorm_probs"; break;
    case SamplingKind::kTopPRenormProbs: bench_op = "top_p_renorm_probs"; break;
    case SamplingKind::kTopKMaskLogits: bench_op = "top_k_mask_logits"; break;
    case SamplingKind::kSoftmax: bench_op = "softmax"; break;
    case SamplingKind::kArgmax: bench_op = "argmax"; break;
    default: break;
  }
  if (bench_op != nullptr && sampling_reads_logits(kind)) set["dtype"] = dtype_name(dtype);
  record(d.name, {{"batch_size", batch}}, bench_op, set, [&] { return d; });
}

}  // namespace trace

// ---- kjit_top_k ---------------------------------------------------------------------------------

Definition top_k_definition(DType dtype, int64_t vocab, int64_t k) {
  Definition d;
  d.op_type = "top_k";
  d.name = fmt::format("top_k_v{}_k{}{}", vocab, k, dtype_suffix(dtype));
  d.op = "top_k";
  d.entry = "kjit_top_k";
  d.description =
      "the k largest elements of each row and their indices, in descending order (equal values "
      "by ascending index, NaN above +inf)";
  d.axes = {var("batch_size", "rows"), constant("vocab_size", vocab, "row length"),
            constant("k", k, "elements kept per row")};
  d.inputs = {tensor("input", {"batch_size", "vocab_size"}, dtype, "scores or logits")};
  d.outputs = {tensor("values", {"batch_size", "k"}, dtype, "the k largest, descending"),
               tensor("indices", {"batch_size", "k"}, DType::kI32, "their indices in the row")};
  d.reference = "tools/devkit/reference/sampling_ref.hpp: ref::top_k";
  return d;
}

OpDef top_k_op_def() {
  OpDef d;
  d.name = "top_k";
  d.summary = "top-k values and indices per row (sorted, ties by index, NaN largest)";
  d.axes = {{"dtype", {"fp32", "bf16", "fp16"}, true, "input dtype"},
            align_axis(),
            vocab_axis(),
            {"k", {}, false, "elements kept (default 1; a run-time value up to 1024)"}};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    const DType dtype = dtype_from_name(args.at("dtype"));
    const int64_t vocab =
        args.count("vocab") ? positive_int_arg(args, "vocab", kRowKernelMaxVocab) : 128256;
    const int64_t k = args.count("k") ? positive_int_arg(args, "k", kTopKMaxK) : 1;
    return top_k_spec(select_top_k(dtype, vocab, k, vec_ok_arg(args, dtype, vocab)));
  };
  d.catalog = [] {
    std::vector<SetArgs> out;
    for (const char* dt : {"fp32", "bf16", "fp16"}) out.push_back({{"dtype", dt}});
    out.push_back({{"dtype", "fp32"}, {"align", "4"}});
    return out;
  };
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    return std::vector<SetArgs>{{{"dtype", dtype_name(def.tensor_dtype("input"))},
                                 {"vocab", std::to_string(def.const_axis("vocab_size"))},
                                 {"k", std::to_string(def.const_axis("k"))}}};
  };
  d.definitions = [] {
    // Speculative decoding's draft candidates and MoE-style score selection at Llama 3's and
    // Qwen 2.5's vocabularies, on fp32 logits as engines keep them for sampling.
    std::vector<Definition> out;
    for (int64_t v : {128256, 151936}) {
      for (int64_t k : {8, 64}) out.push_back(top_k_definition(DType::kF32, v, k));
    }
    return out;
  };
  return d;
}

namespace trace {

void top_k(DType dtype, int64_t vocab, int64_t k, int64_t batch) noexcept {
  const Definition d = top_k_definition(dtype, vocab, k);
  const ojson set = {{"dtype", dtype_name(dtype)},
                     {"batch", std::to_string(batch)},
                     {"vocab", std::to_string(vocab)},
                     {"k", std::to_string(k)}};
  record(d.name, {{"batch_size", batch}}, "top_k", set, [&] { return d; });
}

}  // namespace trace

}  // namespace kjit::ops
