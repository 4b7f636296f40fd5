// See comm_desc.hpp.
#include "ops/comm/comm_desc.hpp"

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "ops/comm/all_reduce.hpp"

namespace kjit::ops {

namespace {

using namespace def;

Definition comm_definition(const char* op, DType dtype, int64_t hidden, int world,
                           const char* description) {
  Definition d;
  d.name = fmt::format("{}_h{}_tp{}{}", op, hidden, world, dtype_suffix(dtype));
  d.op_type = op;
  d.op = op;
  d.entry = std::string("kjit_") + op;
  d.description = description;
  d.axes = {var("batch_size", "rows: tokens in the batch"),
            constant("hidden_size", hidden, "row length"),
            constant("world_size", world, "ranks of the tensor-parallel group")};
  return d;
}

// The axes both ops share; `size` names what steers the vector width.
OpDef comm_op_def(const char* name, const char* summary, const char* size, const char* size_help,
                  jit::Spec (*make)(DType, int, int64_t, int),
                  std::vector<std::pair<int, int64_t>> more) {
  OpDef d;
  d.name = name;
  d.summary = summary;
  d.axes = {{"dtype", {"bf16", "fp16", "fp32"}, true, "element dtype"},
            {"world", {"1", "2", "3", "4", "5", "6", "7", "8"}, true, "ranks in the group"},
            {size, {}, false, size_help},
            {"align",
             {"16", "8", "4", "2"},
             false,
             "byte alignment of pointers (and row strides) (default 16)"}};
  d.arch_families = {"sm_80+"};
  const std::string size_name = size;
  d.make_spec = [d, make, size_name](const SetArgs& args) {
    check_set_args(d, args);
    const DType dtype = dtype_from_name(args.at("dtype"));
    const int world = std::stoi(args.at("world"));
    const int64_t n =
        args.count(size_name) ? positive_int_arg(args, size_name, int64_t{1} << 40) : 4096;
    const int align = args.count("align") ? std::stoi(args.at("align")) : 16;
    return make(dtype, world, n, align);
  };
  // Every dtype for groups of 2, 4 and 8 at the default size (16-byte vectors), then the
  // extras: `more` (other sizes, and groups of one).
  d.catalog = [size_name, more] {
    std::vector<SetArgs> out;
    for (const char* dt : {"bf16", "fp16", "fp32"}) {
      for (int w : {2, 4, 8}) out.push_back({{"dtype", dt}, {"world", std::to_string(w)}});
    }
    for (const auto& [w, n] : more) {
      out.push_back(
          {{"dtype", "bf16"}, {"world", std::to_string(w)}, {size_name, std::to_string(n)}});
    }
    return out;
  };
  d.precompile_sets = [size_name](const Definition& def, const VarAxes&) {
    return std::vector<SetArgs>{{{"dtype", dtype_name(def.tensor_dtype("in"))},
                                 {"world", std::to_string(def.const_axis("world_size"))},
                                 {size_name, std::to_string(def.const_axis("hidden_size"))}}};
  };
  return d;
}

}  // namespace

Definition all_reduce_definition(DType dtype, int64_t hidden, int world) {
  Definition d = comm_definition("all_reduce", dtype, hidden, world,
                                 "out = the sum of in over the ranks of the group (one-shot "
                                 "kernel up to small_max_bytes, NCCL above)");
  d.inputs = {tensor("in", {"batch_size", "hidden_size"}, dtype, "this rank's partial sums")};
  d.outputs = {tensor("out", {"batch_size", "hidden_size"}, dtype, "may be in (in place)")};
  d.reference = "tools/devkit/reference/comm_ref.hpp: ref::all_reduce_sum";
  return d;
}

Definition all_reduce_add_rmsnorm_definition(DType dtype, int64_t hidden, int world) {
  Definition d = comm_definition(
      "all_reduce_add_rmsnorm", dtype, hidden, world,
      "a = the sum of in over the ranks (rounded to the dtype); residual += a (rounded); out = "
      "rmsnorm(residual) * weight");
  d.inputs = {tensor("in", {"batch_size", "hidden_size"}, dtype, "this rank's partial sums"),
              tensor("weight", {"hidden_size"}, dtype, "per-column scale"),
              tensor("residual", {"batch_size", "hidden_size"}, dtype, "the residual stream"),
              scalar("eps", "added to the mean square")};
  d.outputs = {
      tensor("residual", {"batch_size", "hidden_size"}, dtype, "residual + the sum, in place"),
      tensor("out", {"batch_size", "hidden_size"}, dtype, "the normalized rows; may be in")};
  d.reference = "tools/devkit/reference/comm_ref.hpp: ref::all_reduce_add_rmsnorm";
  return d;
}

OpDef all_reduce_op_def() {
  OpDef d =
      comm_op_def("all_reduce", "out = sum over the group's ranks of in (the one-shot kernel)",
                  "numel", "elements of the message (default 4096); steers the vector width",
                  [](DType dtype, int world, int64_t numel, int align) {
                    return all_reduce_spec(select_all_reduce(dtype, world, numel, align));
                  },
                  {{1, 4096}, {2, 4097}});
  // Tensor-parallel groups of 2 / 4 / 8 at the hidden sizes of Llama 3 8B and 70B.
  d.definitions = [] {
    return std::vector<Definition>{all_reduce_definition(DType::kBF16, 4096, 2),
                                   all_reduce_definition(DType::kBF16, 8192, 8)};
  };
  return d;
}

OpDef all_reduce_add_rmsnorm_op_def() {
  OpDef d = comm_op_def(
      "all_reduce_add_rmsnorm",
      "residual += sum over ranks of in; out = rmsnorm(residual) * weight (one-shot kernel)",
      "hidden", "row length (default 4096); steers the vector width and block size",
      [](DType dtype, int world, int64_t hidden, int align) {
        return all_reduce_add_rmsnorm_spec(
            select_all_reduce_add_rmsnorm(dtype, world, hidden, align));
      },
      {{2, 1024}, {2, 2048}, {2, 4097}, {1, 4096}});
  d.definitions = [] {
    return std::vector<Definition>{all_reduce_add_rmsnorm_definition(DType::kBF16, 4096, 2),
                                   all_reduce_add_rmsnorm_definition(DType::kBF16, 8192, 8)};
  };
  return d;
}

}  // namespace kjit::ops
