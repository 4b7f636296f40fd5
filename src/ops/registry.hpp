// The op registry: what `kjit-cli ops / compile / defs` and the compile-everything tests see of
// each op. Each family's descriptor (src/ops/<family>/<family>_desc.cpp) builds its OpDefs;
// registry.cpp lists them.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "jit/spec.hpp"
#include "diag/definition.hpp"

namespace kjit::ops {

using SetArgs = std::map<std::string, std::string>;  // --set name=value

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
};

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

}  // namespace kjit::ops
