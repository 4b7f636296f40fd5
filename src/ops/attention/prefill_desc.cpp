// See prefill_desc.hpp.
#include "ops/attention/prefill_desc.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "diag/trace_dump.hpp"
#include "ops/attention/prefill.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using namespace def;
using ojson = nlohmann::ordered_json;

// `kjit-cli compile prefill_attention --set ...`: the planner's choice for these arguments.
jit::Spec prefill_spec_from_args(const OpDef& d, const SetArgs& args) {
  check_set_args(d, args);
  const DType dt = args.at("dtype") == "fp16" ? DType::kF16 : DType::kBF16;
  const int64_t group = args.count("group") ? positive_int_arg(args, "group", 1 << 20) : 1;
  // Without a kernel named, the mma.sync kernel every arch runs (sm_90a plans choose the wgmma
  // kernel: name it to compile that one).
  const std::string kernel = args.count("kernel") ? args.at("kernel") : "mma_sm80";
  const bool pingpong = kernel == "wgmma_pingpong_sm90a";
  const bool persistent = kernel == "wgmma_persistent_sm90a";
  const bool wgmma = pingpong || persistent || kernel == "wgmma_sm90a";
  const std::string kv = args.count("kv_dtype") ? args.at("kv_dtype") : args.at("dtype");
  if (kv != "e4m3" && kv != args.at("dtype")) {
    fail(KJIT_ERROR_INVALID_ARGUMENT, "prefill_attention: kv_dtype is dtype ({}) or e4m3, not {}",
         args.at("dtype"), kv);
  }
  if (kv == "e4m3" && (persistent || pingpong)) {
    fail(KJIT_ERROR_INVALID_ARGUMENT,
         "prefill_attention: fp8 keys and values run mma_sm80 or wgmma_sm90a, not {}", kernel);
  }
  PrefillConfig c = select_prefill(dt, std::stoi(args.at("head_dim")), group, SmemBudget{}, wgmma,
                                   wgmma ? 1 : 0, kv == "e4m3");
  c.pingpong = pingpong ? 1 : 0;
  c.persistent = persistent ? 1 : 0;
  return prefill_spec(c);
}

}  // namespace

Definition batch_prefill_definition(const PrefillDefAxes& a) {
  const bool paged = a.page_size > 0;
  Definition d;
  d.name =
      fmt::format("batch_prefill_q{}_k{}_d{}_{}{}{}{}", a.qo_heads, a.kv_heads, a.head_dim,
                  paged ? fmt::format("ps{}", a.page_size) : std::string("ragged"),
                  paged && !a.nhd ? "_hnd" : "", a.causal ? "_causal" : "", dtype_suffix(a.dtype));
  d.op_type = "batch_prefill";
  d.op = "prefill_attention";
  d.entry = paged ? "kjit_batch_prefill_run" : "kjit_batch_prefill_ragged_run";
  d.description = fmt::format(
      "ragged queries (request b owns rows qo_indptr[b] .. qo_indptr[b+1] of q) against {}, "
      "planned by kjit_batch_prefill_plan: query head i reads kv head i / (num_qo_heads / "
      "num_kv_heads); a request's q_len new tokens are the last of its kv_len keys{}; "
      "x_j = sm_scale * (q . k_j) (or cap * tanh(x_j / cap)), out = sum_j softmax(x)_j v_j, "
      "lse = log(sum_j exp(x_j))",
      paged ? fmt::format("its paged KV cache ({} layout)", a.nhd ? "NHD" : "HND")
            : std::string("its rows kv_indptr[b] .. kv_indptr[b+1] of the packed k and v"),
      a.causal ? " and query i sees keys j <= kv_len - q_len + i (causal)" : "");
  d.axes = {var("total_q", "query tokens of all requests")};
  if (paged) {
    d.axes.push_back(var("batch_size", "requests"));
    d.axes.push_back(var("len_indptr", "batch_size + 1"));
    d.axes.push_back(var("num_kv_indices", "entries of the page table"));
    d.axes.push_back(var("num_pages", "pages in the caches"));
  } else {
    d.axes.push_back(var("len_indptr", "requests + 1"));
    d.axes.push_back(var("total_kv", "keys of all requests"));
  }
  d.axes.push_back(constant("num_qo_heads", a.qo_heads, "query heads"));
  d.axes.push_back(constant("num_kv_heads", a.kv_heads, "key / value heads"));
  d.axes.push_back(constant("head_dim", a.head_dim, "elements per head"));
  if (paged) d.axes.push_back(constant("page_size", a.page_size, "token slots per page"));
  const std::vector<std::string> kv_shape =
      !paged  ? std::vector<std::string>{"total_kv", "num_kv_heads", "head_dim"}
      : a.nhd ? std::vector<std::string>{"num_pages", "page_size", "num_kv_heads", "head_dim"}
              : std::vector<std::string>{"num_pages", "num_kv_heads", "page_size", "head_dim"};
  d.inputs = {tensor("q", {"total_q", "num_qo_heads", "head_dim"}, a.dtype, "the new tokens"),
              tensor(paged ? "k_cache" : "k", kv_shape, a.dtype, "keys"),
              tensor(paged ? "v_cache" : "v", kv_shape, a.dtype, "values"),
              tensor("qo_indptr", {"len_indptr"}, DType::kI32, "each request's rows of q")};
  if (paged) {
    d.inputs.push_back(
        tensor("kv_indices", {"num_kv_indices"}, DType::kI32, "page ids, request by request"));
    d.inputs.push_back(
        tensor("kv_indptr", {"len_indptr"}, DType::kI32, "each request's range in kv_indices"));
    d.inputs.push_back(
        tensor("kv_last_page_len", {"batch_size"}, DType::kI32, "tokens in each last page"));
  } else {
    d.inputs.push_back(
        tensor("kv_indptr", {"len_indptr"}, DType::kI32, "each request's rows of k and v"));
  }
  d.inputs.push_back(scalar("sm_scale", "logit scale (plan option; 0: 1 / sqrt(head_dim))"));
  d.inputs.push_back(scalar("logits_soft_cap", "plan option; 0: off"));
  d.inputs.push_back({"window_left",
                      {},
                      true,
                      "int32",
                      "plan option; -1: off, else keys j >= kv_len - q_len + i - window_left"});
  d.outputs = {tensor("out", {"total_q", "num_qo_heads", "head_dim"}, a.dtype,
                      "attention output (0 for a query without keys)"),
               tensor("lse", {"total_q", "num_qo_heads"}, DType::kF32,
                      "optional: log-sum-exp of the logits, natural log (-inf without keys)")};
  d.reference = "tools/devkit/reference/prefill_ref.hpp: ref::prefill_attention";
  return d;
}

OpDef prefill_attention_op_def() {
  OpDef d;
  d.name = "prefill_attention";
  d.summary =
      "batch prefill / append attention: ragged queries over a paged or ragged KV (mma.sync, "
      "or wgmma on sm_90a; GQA rows packed, causal / window / soft cap)";
  d.axes = {{"dtype", {"bf16", "fp16"}, true, "q, k, v and out dtype"},
            {"kv_dtype",
             {"bf16", "fp16", "e4m3"},
             false,
             "k and v dtype: dtype (default) or e4m3 (fp8 keys and values: the mma_sm80 kernel, or "
             "wgmma_sm90a at head_dim 64 / 128)"},
            {"head_dim", {"64", "128", "256"}, true, "head size"},
            {"group", {}, false, "query heads per kv head (1..16; default 1)"},
            {"kernel",
             {"mma_sm80", "wgmma_sm90a", "wgmma_pingpong_sm90a", "wgmma_persistent_sm90a"},
             false,
             "mma_sm80 (default here, sm_80+), wgmma_sm90a (the Hopper kernel: what plans without "
             "a causal mask choose on compute capability 9.0, and causal ones at head_dim 256), "
             "wgmma_pingpong_sm90a (the same with its consumer warpgroups taking turns) or "
             "wgmma_persistent_sm90a (its persistent form, CTAs walking the tiles: what causal "
             "plans choose there at head_dim 64 / 128; its two Q buffers do not fit at 256)"}};
  d.arch_families = {"sm_80+", "sm_90a"};
  d.make_spec = [d](const SetArgs& args) { return prefill_spec_from_args(d, args); };
  d.catalog = [] {
    std::vector<SetArgs> out;
    for (const char* dt : {"bf16", "fp16"}) {
      for (const char* hd : {"64", "128", "256"}) {
        out.push_back({{"dtype", dt}, {"head_dim", hd}});
        out.push_back({{"dtype", dt}, {"kv_dtype", "e4m3"}, {"head_dim", hd}});
      }
    }
    for (const char* dt : {"bf16", "fp16"}) {
      for (const char* hd : {"64", "128", "256"}) {
        out.push_back({{"dtype", dt}, {"head_dim", hd}, {"kernel", "wgmma_sm90a"}});
        out.push_back({{"dtype", dt}, {"head_dim", hd}, {"kernel", "wgmma_pingpong_sm90a"}});
        // The persistent form's second Q buffer does not fit beside the ring at 256.
        if (std::string(hd) != "256") {
          out.push_back({{"dtype", dt}, {"head_dim", hd}, {"kernel", "wgmma_persistent_sm90a"}});
          // fp8 keys and values on the wgmma kernel: its raw e4m3 tiles do not fit at 256.
          out.push_back(
              {{"dtype", dt}, {"kv_dtype", "e4m3"}, {"head_dim", hd}, {"kernel", "wgmma_sm90a"}});
        }
      }
    }
    return out;
  };
  // The dtype, head size and query heads per kv head; the page size, layout and lengths are
  // launch arguments.
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    const int64_t qo = def.const_axis("num_qo_heads"), kv = def.const_axis("num_kv_heads");
    if (kv <= 0 || qo % kv != 0) {
      fail(KJIT_ERROR_INVALID_ARGUMENT,
           "definition {}: {} query heads are no multiple of {} kv "
           "heads",
           def.name, qo, kv);
    }
    // The default kernels: mma.sync (sm_80+) and the wgmma kernel and (head_dim 64 / 128) its
    // persistent form that sm_90a plans choose (without / with a causal mask; a target compiles
    // the specs its arch runs).
    const std::string hd = std::to_string(def.const_axis("head_dim"));
    std::vector<SetArgs> sets{{{"dtype", dtype_name(def.tensor_dtype("q"))},
                               {"head_dim", hd},
                               {"group", std::to_string(qo / kv)}}};
    // fp8 keys and values: the mma.sync kernel only.
    const std::string k_name = def.tensor_dtype_name("k_cache").empty() ? "k" : "k_cache";
    if (def.tensor_dtype(k_name) == DType::kE4M3) {
      sets.front()["kv_dtype"] = "e4m3";
      return sets;
    }
    for (const char* kernel : {"wgmma_sm90a", "wgmma_persistent_sm90a"}) {
      if (hd == "256" && std::string(kernel) == "wgmma_persistent_sm90a") continue;
      sets.push_back(sets.front());
      sets.back()["kernel"] = kernel;
    }
    return sets;
  };
  d.definitions = [] {
    // Llama 3 8B / Mistral 7B (32 / 8) and Llama 3 70B (64 / 8), causal, over a page-16 cache
    // and as a first prefill over ragged k / v.
    std::vector<Definition> out;
    for (const int q : {32, 64}) {
      for (const int ps : {16, 0}) {
        out.push_back(batch_prefill_definition({DType::kBF16, q, 8, 128, ps}));
      }
    }
    return out;
  };
  return d;
}

namespace trace {

void batch_prefill(const PrefillDefAxes& a, int64_t batch, int64_t total_q, int64_t num_kv_indices,
                   int64_t num_pages, int64_t kv_len) noexcept {
  const Definition d = batch_prefill_definition(a);
  const bool paged = a.page_size > 0;
  ojson set = {
      {"dtype", dtype_name(a.dtype)},
      {"batch", std::to_string(batch)},
      {"q_len", std::to_string(std::max<int64_t>(total_q / std::max<int64_t>(batch, 1), 1))},
      {"kv_len", std::to_string(std::max<int64_t>(kv_len, 1))},
      {"qo_heads", std::to_string(a.qo_heads)},
      {"kv_heads", std::to_string(a.kv_heads)},
      {"head_dim", std::to_string(a.head_dim)},
      {"page_size", std::to_string(a.page_size)},
      {"causal", a.causal ? "1" : "0"}};
  if (paged) set["layout"] = a.nhd ? "nhd" : "hnd";
  ojson axes = {{"total_q", total_q}};
  if (paged) axes["batch_size"] = batch;
  axes["len_indptr"] = batch + 1;
  if (paged) {
    axes["num_kv_indices"] = num_kv_indices;
    axes["num_pages"] = num_pages;
  } else {
    axes["total_kv"] = num_pages;
  }
  record(d.name, axes, "batch_prefill", set, [&] { return d; });
}

}  // namespace trace

}  // namespace kjit::ops
