// The op registry: what `kjit-cli ops / compile / defs` and the compile-everything tests see of
// each op. Each family's descriptor (src/ops/<family>/<family>_desc.cpp) builds its OpDefs;
// registry.cpp lists them.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diag/definition.hpp"
#include "jit/arch.hpp"
#include "jit/spec.hpp"

namespace kjit::ops {

using SetArgs = std::map<std::string, std::string>;  // --set name=value
// The var-axis values of one call: a workload line's "axes" ({"batch_size": 8}). Empty for a
// definition on its own, whose calls may have any.
using VarAxes = std::map<std::string, int64_t>;

struct AxisDef {
  std::string name;
  std::vector<std::string> values;  // allowed values; empty means "a positive integer"
  bool required = true;
  std::string help;
};

struct OpDef {
  std::string name;
  std::string summary;
  std::vector<AxisDef> axes;
  std::vector<std::string> arch_families;
  // Builds the spec the library would use for these values. Throws KJIT_ERROR_INVALID_ARGUMENT
  // on unknown, missing or bad values, KJIT_ERROR_UNSUPPORTED on combinations it cannot serve.
  std::function<jit::Spec(const SetArgs&)> make_spec;
  // The specializations worth compiling ahead of use (`compile --all`, CI compile tests).
  std::function<std::vector<SetArgs>()> catalog;
  // The op's definitions at realistic const axes (`kjit-cli defs export`, bench/definitions/).
  std::function<std::vector<Definition>()> definitions;
  // Warm-up from a definition or workload file (kjit_precompile_file, `kjit-cli compile --from`):
  // the --set values of every specialization a call of definition `d` (one of this op's, e.g. read
  // back from bench/definitions/) selects, given the var axes the call has. An axis missing from
  // `axes` may have any value, so each choice it would steer is included. Choices that depend on
  // the device (the sm_90 cluster paths, the GEMM's wgmma path, decode attention's shared-memory
  // budget) are included for every arch; each spec's arch families keep it to the targets that
  // can use it. Throws KJIT_ERROR_INVALID_ARGUMENT when `d` is not a definition this op serves.
  std::function<std::vector<SetArgs>(const Definition& d, const VarAxes& axes)> precompile_sets;
  // Ops with autotuner tactics (docs/autotune.md): the tactic-space version a stored record must
  // carry (0: the op has none), and the specializations a record's tactic runs for its bucket on
  // a device of `target`'s arch, exactly the specs the op's run-time path asks for there (through
  // the op's own tactic -> config mapping; a few when the run picks among them, as decode
  // attention's 32- or 64-bit row offsets by the caches' size). What `kjit-cli aot build` packs
  // beside the catalog for the tuning records it packs (tactic_specs_for in precompile.hpp).
  // Empty when the tactic is not valid for the bucket on that arch; throws
  // KJIT_ERROR_INVALID_ARGUMENT when the bucket or the tactic is not one of this op's.
  int tactic_space = 0;
  std::function<std::vector<jit::Spec>(const std::string& bucket, const std::string& tactic,
                                       const jit::ArchTarget& target)>
      tactic_specs;
};

// A var axis of a call, when the workload line gives it.
std::optional<int64_t> var_axis(const VarAxes& axes, const std::string& name);

const std::vector<OpDef>& op_registry();
const OpDef* find_op(std::string_view name);
// find_op, or KJIT_ERROR_INVALID_ARGUMENT naming the known ops.
const OpDef& op_or_throw(std::string_view name);

// "dtype=bf16,hidden=4096" (pairs separated by commas or white space) as SetArgs. Throws
// KJIT_ERROR_INVALID_ARGUMENT on a pair without '=' or a name given twice.
SetArgs parse_set_list(std::string_view text);

// Helpers for make_spec implementations: reject names not in `def.axes`, check values.
void check_set_args(const OpDef& def, const SetArgs& args);
long long positive_int_arg(const SetArgs& args, const std::string& name, long long max);

// Shared memory per SM, in KiB, of the devices of `target`'s compute capability (the CUDA
// programming guide's table: 164 for 8.0 / 8.7, 100 for 8.6 / 8.9 / 12.x, 228 for 9.0 and 10.x);
// a block may opt in to 1 KiB less. For mappings that size a kernel for a device without one at
// hand (tactic_specs).
int arch_smem_per_sm_kb(const jit::ArchTarget& target);

}  // namespace kjit::ops
