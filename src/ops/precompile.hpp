// Warm-up from files: the definitions (bench/definitions/*.json, a trace's definitions/) and the
// workload lines (bench/workloads/*.jsonl, a trace's workloads/, `kjit-cli bench --from` input)
// an engine runs, mapped to the specializations their calls select through each op's
// precompile_sets (in the family's descriptor, src/ops/<family>/<family>_desc.cpp). What
// kjit_precompile_file and `kjit-cli compile --from` compile.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "diag/definition.hpp"
#include "jit/spec.hpp"
#include "ops/registry.hpp"

namespace kjit::ops {

struct PrecompileSpec {
  std::string where;  // the file (a definition) or "file:line" (a workload line) that asked for it
  jit::Spec spec;
};

// The op serving `d` and the --set values of what a call of it with var axes `axes` selects.
// Throws KJIT_ERROR_INVALID_ARGUMENT when the op is unknown or the mapping gives nothing.
std::pair<const OpDef*, std::vector<SetArgs>> precompile_sets_for(const Definition& d,
                                                                  const VarAxes& axes);

// The specializations `path` asks for, one per URI in the order the file first names them. path:
// a definition (one JSON object: every specialization its calls may select), a workload file
// (JSON lines {"definition": NAME, "axes": {...}}; blank and '#' lines skipped), or a folder of
// them (its *.json and *.jsonl files). A line's definition is read from the definitions/ folder
// beside the file's folder (bench/workloads -> bench/definitions, a trace's workloads ->
// definitions), else taken from the registry's own definitions by name. Throws
// KJIT_ERROR_INVALID_ARGUMENT naming the file and line for a file that cannot be read, text that
// is not JSON, a definition that cannot be found or read, and a line no op maps.
std::vector<PrecompileSpec> precompile_specs_from(const std::string& path);

// One kernel a tuned tactic runs: its spec and a target to build it for.
struct TacticSpec {
  jit::Spec spec;
  jit::ArchTarget target;
};

// The kernels a stored tuning record's tactic runs (its op, tactic-space version, bucket and
// tactic, as the record holds them) on each of `archs`: the op's tactic_specs facet, each spec
// kept to the targets its arch families include, each (URI, target) once. What `kjit-cli aot
// build` packs for the records it packs (docs/aot.md). Throws KJIT_ERROR_INVALID_ARGUMENT naming
// why there are none: an op without tactics, another tactic-space version than this kjit's, a
// bucket or tactic the op does not know, a tactic valid on none of `archs`.
std::vector<TacticSpec> tactic_specs_for(const std::string& op, int space_version,
                                         const std::string& bucket, const std::string& tactic,
                                         const std::vector<jit::ArchTarget>& archs);

}  // namespace kjit::ops
