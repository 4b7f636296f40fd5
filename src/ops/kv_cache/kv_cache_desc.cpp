// See kv_cache_desc.hpp.
#include "ops/kv_cache/kv_cache_desc.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "diag/trace_dump.hpp"
#include "ops/kv_cache/kv_cache.hpp"
#include "ops/pdl.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using namespace def;

}  // namespace

Definition append_paged_kv_definition(DType dtype, int64_t kv_heads, int64_t head_dim,
                                      int64_t page_size, bool nhd, bool cache_fp8) {
  Definition d;
  d.name = fmt::format("append_paged_kv_k{}_d{}_ps{}{}{}{}", kv_heads, head_dim, page_size,
                       nhd ? "" : "_hnd", cache_fp8 ? "_e4m3" : "", dtype_suffix(dtype));
  d.op_type = "append_paged_kv";
  d.op = "append_paged_kv";
  d.entry = cache_fp8 ? "kjit_append_paged_kv_cache_fp8" : "kjit_append_paged_kv_cache";
  d.description = fmt::format(
      "writes each appended token's k and v rows to (kv_indices[kv_indptr[b] + pos / page_size], "
      "pos % page_size) of the paged caches ({} layout){}",
      nhd ? "NHD" : "HND", cache_fp8 ? " as float8 e4m3 (x / scale, saturated)" : "");
  d.axes = {var("num_tokens", "appended tokens"),
            var("batch_size", "requests"),
            var("len_indptr", "batch_size + 1"),
            var("num_kv_indices", "entries of the page table"),
            var("num_pages", "pages in the caches"),
            constant("num_kv_heads", kv_heads, "key / value heads"),
            constant("head_dim", head_dim, "elements per head"),
            constant("page_size", page_size, "token slots per page")};
  const std::vector<std::string> cache_shape =
      nhd ? std::vector<std::string>{"num_pages", "page_size", "num_kv_heads", "head_dim"}
          : std::vector<std::string>{"num_pages", "num_kv_heads", "page_size", "head_dim"};
  d.inputs = {
      tensor("append_k", {"num_tokens", "num_kv_heads", "head_dim"}, dtype, "key rows to append"),
      tensor("append_v", {"num_tokens", "num_kv_heads", "head_dim"}, dtype, "value rows to append"),
      tensor("batch_indices", {"num_tokens"}, DType::kI32, "request of each token"),
      tensor("positions", {"num_tokens"}, DType::kI32, "position of each token in its request"),
      tensor("kv_indices", {"num_kv_indices"}, DType::kI32, "page ids, request by request"),
      tensor("kv_indptr", {"len_indptr"}, DType::kI32, "each request's range in kv_indices"),
      tensor("kv_last_page_len", {"batch_size"}, DType::kI32, "tokens in each last page")};
  if (cache_fp8) {
    d.axes.push_back(var("num_scales", "1 (per tensor) or num_kv_heads (per head)"));
    d.inputs.push_back(tensor("k_scale", {"num_scales"}, DType::kF32, "key dequantization scales"));
    d.inputs.push_back(
        tensor("v_scale", {"num_scales"}, DType::kF32, "value dequantization scales"));
  }
  const DType cache_dtype = cache_fp8 ? DType::kE4M3 : dtype;
  d.outputs = {
      tensor("paged_k_cache", cache_shape, cache_dtype, "written at the appended slots only"),
      tensor("paged_v_cache", cache_shape, cache_dtype, "written at the appended slots only")};
  d.reference = "tools/devkit/reference/kv_cache_ref.hpp: ref::append_target";
  return d;
}

OpDef append_paged_kv_op_def() {
  OpDef d;
  d.name = "append_paged_kv";
  d.summary =
      "append k/v tokens to a paged KV cache (FlashInfer semantics; NHD and HND share code)";
  d.axes = {{"dtype", {"bf16", "fp16", "fp32"}, true, "append and cache dtype"},
            {"head_dim", {}, true, "head size (1..1024)"},
            {"align",
             {"16", "8", "4", "2"},
             false,
             "byte alignment of pointers and strides (default 16)"},
            {"early",
             {"0", "1"},
             false,
             "1: the index chain read before the PDL wait (KJIT_PDL_EARLY_INDICES, decode sizes)"},
            {"cache",
             {"same", "e4m3"},
             false,
             "cache dtype: the append dtype (default) or float8 e4m3 with scales"}};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    const std::string& dt = args.at("dtype");
    const DType dtype = dtype_from_name(dt);
    const int64_t hd = positive_int_arg(args, "head_dim", kAppendPagedKvMaxHeadDim);
    const int align = args.count("align") ? std::stoi(args.at("align")) : 16;
    const bool fp8 = args.count("cache") && args.at("cache") == "e4m3";
    AppendPagedKvConfig c = select_append_paged_kv(dtype, hd, align, 0, false, fp8, align);
    c.early_indices = args.count("early") && args.at("early") == "1";
    return append_paged_kv_spec(c);
  };
  d.catalog = [] {
    std::vector<SetArgs> out;
    // Head sizes of Falcon / DeepSeek rope (64), Phi-2 (80), Phi-3 (96), Llama / Mistral / Qwen
    // (128), DeepSeek-V3 q/k (192), Gemma (256) and MLA's compressed KV (512), plus views only 4
    // or 2 bytes aligned (narrower vectors).
    for (int hd : {64, 80, 96, 128, 192, 256, 512}) {
      out.push_back({{"dtype", "bf16"}, {"head_dim", std::to_string(hd)}});
    }
    for (int hd : {64, 128, 256})
      out.push_back({{"dtype", "fp16"}, {"head_dim", std::to_string(hd)}});
    out.push_back({{"dtype", "fp32"}, {"head_dim", "128"}});
    out.push_back({{"dtype", "bf16"}, {"head_dim", "128"}, {"align", "4"}});
    out.push_back({{"dtype", "bf16"}, {"head_dim", "128"}, {"align", "2"}});
    out.push_back({{"dtype", "fp16"}, {"head_dim", "80"}, {"align", "2"}});
    // The decode-size variant of KJIT_PDL_EARLY_INDICES.
    for (int hd : {64, 128, 256}) {
      out.push_back({{"dtype", "bf16"}, {"head_dim", std::to_string(hd)}, {"early", "1"}});
    }
    out.push_back({{"dtype", "fp16"}, {"head_dim", "128"}, {"early", "1"}});
    // fp8 e4m3 caches (the ones decode reads) at the common head sizes, plain and early.
    for (const char* dt : {"bf16", "fp16"}) {
      for (int hd : {64, 128, 256}) {
        out.push_back({{"dtype", dt}, {"head_dim", std::to_string(hd)}, {"cache", "e4m3"}});
      }
    }
    out.push_back({{"dtype", "bf16"}, {"head_dim", "128"}, {"cache", "e4m3"}, {"early", "1"}});
    return out;
  };
  // The early index read at decode sizes where KJIT_PDL_EARLY_INDICES asks for it (sm_90
  // devices), and the plain kernel; the page size and layout are launch arguments.
  d.precompile_sets = [](const Definition& def, const VarAxes& axes) {
    const DType dtype = def.tensor_dtype("append_k");
    const bool fp8 = def.tensor_dtype("paged_k_cache") == DType::kE4M3;
    const int64_t hd = def.const_axis("head_dim");
    const int64_t tokens = var_axis(axes, "num_tokens").value_or(1);
    std::vector<SetArgs> out;
    for (bool early : {false, pdl_early_indices_requested()}) {
      const AppendPagedKvConfig c = select_append_paged_kv(dtype, hd, 16, tokens, early, fp8);
      out.push_back({{"dtype", dtype_name(dtype)}, {"head_dim", std::to_string(hd)}});
      if (c.early_indices) out.back()["early"] = "1";
      if (fp8) out.back()["cache"] = "e4m3";
    }
    return out;
  };
  d.definitions = [] {
    const DType bf = DType::kBF16;
    return std::vector<Definition>{append_paged_kv_definition(bf, 8, 128, 16, true),
                                   append_paged_kv_definition(bf, 8, 128, 16, false),
                                   append_paged_kv_definition(bf, 8, 128, 1, true),
                                   append_paged_kv_definition(bf, 4, 128, 16, true),
                                   append_paged_kv_definition(bf, 8, 128, 16, true, true)};
  };
  return d;
}

namespace trace {

void append_paged_kv(DType dtype, int64_t num_scales, int64_t kv_heads, int64_t head_dim,
                     int64_t page_size, bool nhd, int64_t tokens, int64_t batch,
                     int64_t num_kv_indices, int64_t num_pages) noexcept {
  const bool cache_fp8 = num_scales > 0;
  nlohmann::ordered_json axes = {{"num_tokens", tokens},
                                 {"batch_size", batch},
                                 {"len_indptr", batch + 1},
                                 {"num_kv_indices", num_kv_indices},
                                 {"num_pages", num_pages}};
  if (cache_fp8) axes["num_scales"] = num_scales;
  const Definition d =
      append_paged_kv_definition(dtype, kv_heads, head_dim, page_size, nhd, cache_fp8);
  nlohmann::ordered_json set = {{"dtype", dtype_name(dtype)},
                                {"tokens", std::to_string(tokens)},
                                {"kv_heads", std::to_string(kv_heads)},
                                {"head_dim", std::to_string(head_dim)},
                                {"page_size", std::to_string(page_size)},
                                {"batch", std::to_string(batch)},
                                {"layout", nhd ? "nhd" : "hnd"}};
  if (cache_fp8) {
    set["cache"] = "e4m3";
    set["scales"] = num_scales == 1 ? "tensor" : "head";
  }
  record(d.name, axes, "append_paged_kv", set, [&] { return d; });
}

}  // namespace trace

}  // namespace kjit::ops
