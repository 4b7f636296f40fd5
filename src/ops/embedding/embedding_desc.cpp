// See embedding_desc.hpp.
#include "ops/embedding/embedding_desc.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "diag/trace_dump.hpp"
#include "ops/embedding/embedding.hpp"
#include "util/error.hpp"

namespace kjit::ops {

namespace {

using namespace def;

std::string embedding_name(DType dtype, DType index, int64_t vocab, int64_t hidden) {
  return fmt::format("embedding_v{}_h{}{}{}", vocab, hidden, index == DType::kI64 ? "_ids64" : "",
                     dtype_suffix(dtype));
}

}  // namespace

Definition embedding_definition(DType dtype, DType index, int64_t vocab, int64_t hidden) {
  Definition d;
  d.name = embedding_name(dtype, index, vocab, hidden);
  d.op_type = "embedding";
  d.op = "embedding";
  d.entry = "kjit_embedding";
  d.description =
      "out[t, :] = table[ids[t], :] (the token-embedding lookup; zeros for an id outside the "
      "vocabulary)";
  d.axes = {var("num_tokens", "tokens looked up"),
            constant("vocab_size", vocab, "rows of the table"),
            constant("hidden_size", hidden, "row length")};
  d.inputs = {tensor("table", {"vocab_size", "hidden_size"}, dtype, "embedding table"),
              tensor("ids", {"num_tokens"}, index, "token ids")};
  d.outputs = {tensor("out", {"num_tokens", "hidden_size"}, dtype, "the ids' rows")};
  d.reference = "tools/devkit/reference/embedding_ref.hpp: ref::embedding";
  return d;
}

OpDef embedding_op_def() {
  OpDef d;
  d.name = "embedding";
  d.summary = "out[t, :] = table[ids[t], :], ids on the device; vocab, hidden, tokens at run time";
  d.axes = {{"dtype", {"bf16", "fp16", "fp32"}, true, "table/out dtype"},
            {"index", {"int32", "int64"}, true, "ids dtype"},
            {"vec",
             {"8", "4", "2", "1"},
             true,
             "elements per vector access; at most 16 bytes (fp32: 4)"}};
  d.arch_families = {"sm_80+"};
  d.make_spec = [d](const SetArgs& args) {
    check_set_args(d, args);
    const DType dtype = dtype_from_name(args.at("dtype"));
    const DType index = dtype_from_name(args.at("index"));
    const int vec = std::stoi(args.at("vec"));
    const int elem = static_cast<int>(dtype_size(dtype));
    if (vec * elem > 16) {
      fail(KJIT_ERROR_UNSUPPORTED, "embedding: vec={} x {} is wider than 16 bytes", vec,
           args.at("dtype"));
    }
    // hidden = vec and full alignment: select_embedding then picks exactly this width.
    return embedding_spec(select_embedding(dtype, index, vec, vec * elem));
  };
  d.catalog = [] {
    // vocab, hidden and tokens are run-time values, so this is every specialization there is:
    // (bf16 and fp16 at 8/4/2/1, fp32 at 4/2/1) x two id types.
    std::vector<SetArgs> out;
    for (const char* dt : {"bf16", "fp16", "fp32"}) {
      for (const char* index : {"int32", "int64"}) {
        for (const char* v : {"8", "4", "2", "1"}) {
          if (std::string(dt) == "fp32" && std::string(v) == "8") continue;
          out.push_back({{"dtype", dt}, {"index", index}, {"vec", v}});
        }
      }
    }
    return out;
  };
  // The vector width select_embedding gives the definition's hidden size with 16-byte aligned
  // tensors; the token count selects nothing.
  d.precompile_sets = [](const Definition& def, const VarAxes&) {
    if (def.op_type != "embedding") {
      fail(KJIT_ERROR_INVALID_ARGUMENT, "definition {}: op type {} is not embedding", def.name,
           def.op_type);
    }
    const DType dtype = def.tensor_dtype("table");
    const DType index = def.tensor_dtype("ids");
    const EmbeddingConfig c = select_embedding(dtype, index, def.const_axis("hidden_size"), 16);
    return std::vector<SetArgs>{{{"dtype", dtype_name(dtype)},
                                 {"index", dtype_name(index)},
                                 {"vec", std::to_string(c.vec)}}};
  };
  d.definitions = [] {
    // Llama-3-8B's and Qwen3-8B's token embeddings.
    return std::vector<Definition>{embedding_definition(DType::kBF16, DType::kI32, 128256, 4096),
                                   embedding_definition(DType::kBF16, DType::kI32, 151936, 4096)};
  };
  return d;
}

namespace trace {

void embedding(DType dtype, DType index, int64_t vocab, int64_t hidden, int64_t tokens) noexcept {
  record(embedding_name(dtype, index, vocab, hidden), {{"num_tokens", tokens}}, "embedding",
         {{"dtype", dtype_name(dtype)},
          {"vocab", std::to_string(vocab)},
          {"hidden", std::to_string(hidden)},
          {"tokens", std::to_string(tokens)},
          {"index", dtype_name(index)}},
         [&] { return embedding_definition(dtype, index, vocab, hidden); });
}

}  // namespace trace

}  // namespace kjit::ops
